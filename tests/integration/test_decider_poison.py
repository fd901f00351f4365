"""One input that can never be decided or written must not stall its partition: it ends in
the dead-letter topic with its reason, and the transactions behind it on the same
partition, other tenants' included, go on (issue: "one tenant stalls a partition")."""

import json
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from support.decider_support import event_types, eventually, lone_decider, produce
from support.topic_records import Record, read_records
from support.txbuilders import T0, observed, spec, submit

from events.inputs import Outcome, SubmitTransaction
from events.topics import PARTITIONS, Topics
from services.decider.runtime import MAX_RECORD_BYTES
from services.kafka_setup import ensure_topics, topic_configs

PARTITION = 2


def many_steps(tx_id: str, steps: int) -> SubmitTransaction:
    """An intent the producer and the broker accept (under 1 MiB), whose decider state is
    larger than the intent itself: the state adds each operation's status fields."""
    return SubmitTransaction(
        message_id=f"cmd-{tx_id}",
        tenant="other-tenant",
        tx_id=tx_id,
        agent_id="agent-1",
        fingerprint="f" * 64,
        operations=tuple(spec(f"step-{i}", tx_id=tx_id) for i in range(steps)),
        issued_at=T0,
    )


async def _run_poison_then_normal(
    bootstrap: str, topics: Topics, poison: SubmitTransaction, log_dir: Path
) -> tuple[int, Record]:
    """The poison, then a normal transaction, on one partition: the normal one commits.
    Returns the poison's offset and its dead letter."""
    normal = submit(["a"], tx_id="normal-1")
    [poison_offset, _] = await produce(
        bootstrap, topics.commands, [poison, normal], partition=PARTITION
    )
    async with lone_decider(bootstrap, topics.prefix, log_dir) as stack:

        async def dispatched() -> list[str] | None:
            types = await event_types(bootstrap, topics, "normal-1")
            return types if "OperationDispatched" in types else None

        await eventually(dispatched, "the normal transaction's step is dispatched")
        # The dispatcher's part: the provider confirmed the step.
        await produce(
            bootstrap,
            topics.observations,
            [observed("a", 1, Outcome.SUCCEEDED, tx_id="normal-1")],
            partition=PARTITION,
        )

        async def committed() -> list[str] | None:
            types = await event_types(bootstrap, topics, "normal-1")
            return types if "TransactionCommitted" in types else None

        await eventually(committed, "the normal transaction behind the poison commits")

        async def dead_letter() -> Record | None:
            letters = await read_records(bootstrap, topics.dead_letters)
            return letters[0] if letters else None

        letter = await eventually(dead_letter, "the poison input is dead-lettered")
        assert stack.processes["decider"].poll() is None, "the decider must keep running"
    assert await event_types(bootstrap, topics, poison.tx_id) == []
    assert len(await read_records(bootstrap, topics.dead_letters)) == 1
    return poison_offset, letter


async def test_an_input_whose_decision_is_too_large_is_dead_lettered_and_the_partition_moves_on(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    poison = many_steps("huge-1", steps=3000)
    raw = poison.model_dump_json().encode()
    # The intent itself fits Kafka; the state deciding it would write does not (> 1 MiB).
    assert MAX_RECORD_BYTES < len(raw) < 1_000_000

    offset, letter = await _run_poison_then_normal(kafka_bootstrap, topics, poison, tmp_path)

    assert letter.headers["origin"] == f"{topics.commands}:{PARTITION}:{offset}".encode()
    assert letter.headers["reason"].startswith(b"record_too_large"), letter.headers
    # Too large to copy safely: the dead letter points at the input, kept on its topic.
    assert letter.value is not None
    assert json.loads(letter.value)["omitted_bytes"] == len(raw)


async def test_an_input_whose_records_kafka_refuses_is_dead_lettered_and_the_partition_moves_on(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    """Under the decider's own bound, but over what this broker's events topic accepts:
    Kafka refuses the record, and retrying the same input would be refused forever."""
    topics = Topics(topic_prefix)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        limit = {**topic_configs(topics)[topics.events], "max.message.bytes": "100000"}
        await admin.create_topics([NewTopic(topics.events, PARTITIONS, 1, topic_configs=limit)])
    finally:
        await admin.close()
    await ensure_topics(kafka_bootstrap, topics)
    poison = many_steps("big-1", steps=500)
    raw = poison.model_dump_json().encode()
    assert 100_000 < len(raw) < MAX_RECORD_BYTES // 2

    offset, letter = await _run_poison_then_normal(kafka_bootstrap, topics, poison, tmp_path)

    assert letter.headers["origin"] == f"{topics.commands}:{PARTITION}:{offset}".encode()
    assert letter.headers["reason"].startswith(b"record_refused_by_kafka"), letter.headers
    assert letter.value == raw  # small enough: the input itself is kept as evidence


async def test_an_input_holding_a_nul_is_dead_lettered_and_the_partition_moves_on(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    """A command written to recon.commands by a side door, its text holding a NUL, which
    the intake refuses (422) and evidence never holds (events.safe_json): decided, its
    events would hold it, and Postgres, storing none, would refuse the projector's batch at
    every retry, stopping the partition's projection for every tenant."""
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    poison = many_steps("nul-1", steps=1).model_copy(update={"agent_id": "agent-\x00"})
    raw = poison.model_dump_json().encode()

    offset, letter = await _run_poison_then_normal(kafka_bootstrap, topics, poison, tmp_path)

    assert letter.headers["origin"] == f"{topics.commands}:{PARTITION}:{offset}".encode()
    assert letter.headers["reason"] == b"unstorable input: a NUL in its text"
    assert letter.value == raw
