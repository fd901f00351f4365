"""The kafka client benchmark writes what the decider writes per transaction
(services.devtools.kafka_client_run.plan over services.devtools.kafka_client_shape)."""

import json

from services.devtools.kafka_client_run import plan
from services.devtools.kafka_client_shape import steps


def test_a_transaction_writes_one_state_per_key_and_one_offset_per_input_partition() -> None:
    found = steps(1)  # one README transaction: a submission and its four answers
    assert [s.role for s in found] == ["commands", *["observations"] * 4]
    partition = found[0].partition
    inputs = [("p-commands", partition, 7, 0)] + [
        ("p-observations", partition, 10 + i, i) for i in range(1, len(found))
    ]
    records = plan(inputs, partition, found, "p-")
    offset_records = [r for r in records if (r.key or b"").startswith(b"offset:")]
    states = [r for r in records if r.topic == "p-state" and r not in offset_records]
    offsets = [json.loads(r.value) for r in offset_records]
    # The last decided state, once: the finished transaction's marker.
    last = next(o.value for o in found[-1].outputs if o.role == "state")
    assert len(states) == 1 and states[0].value == last
    assert {(o["topic"], o["offset"]) for o in offsets} == {
        ("p-commands", 8),
        ("p-observations", 10 + len(found)),  # the last answer at 10 + 4, next 15
    }
    assert {r.partition for r in records} == {partition}
    # Every answer is written with the inline header, every event with its type.
    assert sum(1 for r in records if r.topic == "p-answers") == len(found) - 1
    assert all(r.headers for r in records if r.topic == "p-events")
