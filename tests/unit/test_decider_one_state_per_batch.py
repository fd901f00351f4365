"""A transaction decided several times in one Kafka transaction's batch has one state record
on recon.decider-state, the latest, where the first was planned (services.decider.runtime):
the changelog's reader keeps the last record per key and never sees part of a Kafka
transaction, so the earlier states were bytes for nothing."""

from types import SimpleNamespace

from aiokafka import TopicPartition

from events.topics import Topics
from services.config import Settings
from services.decider.runtime import Decider, OwnedPartition
from services.decider.staged import Staged
from services.devtools.decider_micro import T0
from services.devtools.synthetic_log import transaction_records
from transactions.finished import FinishedTransaction

TOPICS = Topics("")


class _NoneFinished:
    async def get(self, key: bytes) -> None:
        return None


async def test_a_transaction_decided_twice_in_a_batch_writes_its_latest_state_once() -> None:
    decider = Decider(
        Settings(kafka_bootstrap="127.0.0.1:9", database_url="", topics=TOPICS, environment="test")
    )
    owned = OwnedPartition(None, {}, _NoneFinished())  # type: ignore[arg-type]
    staged = owned.staged = Staged(0)
    tp = TopicPartition(TOPICS.commands, 0)
    values = [
        r.value
        for i in range(2)
        for r in transaction_records(i, T0, webhook_every=1)
        if r.role in ("commands", "observations")
    ]
    for offset, value in enumerate(values):
        record = SimpleNamespace(value=value, key=None, headers=[], offset=offset)
        await decider._decide_one(owned, staged, tp, record)

    states = [p for p in staged.planned if p.topic == TOPICS.decider_state]
    assert len(values) > 2 and len(states) == 2  # two transactions, several inputs each
    for (kafka_key, index), kept in zip(
        staged.changelog.values(), staged.changes.values(), strict=True
    ):
        assert staged.planned[index].key == kafka_key
        assert staged.planned[index].value == kept.model_dump_json().encode()
    # Each ended in the batch: the record first planned as a full state is now its marker.
    assert all(isinstance(kept, FinishedTransaction) for kept in staged.changes.values())
    await decider.stop_clients()
