"""A decider taking a partition whose changelog was written before the consumed offsets
were kept on it: the earlier release committed them to the consumer group inside its
transactions (`send_offsets_to_transaction`). The decider starts from those, so an
upgrade neither loses nor repeats an input; from its first transaction on, the changelog
holds the position, and the group's offsets of an input it has not read since stay as
the earlier release left them (services.decider.input_offsets.start_offset)."""

from pathlib import Path

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from support.decider_support import (
    changelog_offsets,
    event_types,
    eventually,
    group_offsets,
    lone_decider,
    produce,
)
from support.txbuilders import observed, submit

from events.inputs import DeciderInput, Outcome
from events.keys import partition_key
from events.topics import Topics
from services.decider.input_offsets import LAG_MARKER_METADATA
from services.kafka_setup import ensure_topics
from transactions.finished import finish
from transactions.transaction import handle, initial_state

PARTITION = 1
OLD = "old-1"


async def test_a_changelog_without_offsets_resumes_from_the_offsets_the_earlier_release_committed(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    group = f"{topic_prefix}recon-decider"
    commands = TopicPartition(topics.commands, PARTITION)
    observations = TopicPartition(topics.observations, PARTITION)
    inputs: list[DeciderInput] = [
        submit(["a"], tx_id=OLD),
        observed("a", 1, Outcome.SUCCEEDED, tx_id=OLD),
    ]
    await produce(kafka_bootstrap, topics.commands, inputs[:1], PARTITION)
    await produce(kafka_bootstrap, topics.observations, inputs[1:], PARTITION)

    # What the earlier release left after deciding both: the finished transaction's marker
    # on the changelog and the offsets in the group, committed in one Kafka transaction.
    state = initial_state("demo", OLD)
    for message in inputs:
        state, _ = handle(state, message)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap,
        transactional_id=f"{topic_prefix}recon-decider-{PARTITION}",
        enable_idempotence=True,
        acks="all",
    )
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send(
                topics.decider_state,
                value=finish(state).model_dump_json().encode(),
                key=partition_key("demo", OLD),
                partition=PARTITION,
            )
            await producer.send_offsets_to_transaction({commands: 1, observations: 1}, group)
    finally:
        await producer.stop()
    assert await changelog_offsets(kafka_bootstrap, topics, PARTITION) == {}

    await produce(kafka_bootstrap, topics.commands, [submit(["a"], tx_id="new-1")], PARTITION)
    async with lone_decider(kafka_bootstrap, topic_prefix, tmp_path):

        async def dispatched() -> bool | None:
            types = await event_types(kafka_bootstrap, topics, "new-1")
            return True if "OperationDispatched" in types else None

        await eventually(dispatched, "the input after the earlier release's is decided")

        async def marked() -> dict[str, OffsetAndMetadata] | None:
            found = await group_offsets(kafka_bootstrap, group, PARTITION)
            meta = found.get(topics.commands)
            return found if meta is not None and meta.offset == 2 else None

        # The changelog holds the input read since; the other stays as the earlier release
        # left it, on the group only.
        assert await eventually(marked, "the group's lag marker reaches the new transaction") == {
            topics.commands: OffsetAndMetadata(2, LAG_MARKER_METADATA),
            topics.observations: OffsetAndMetadata(1, ""),
        }
        assert await changelog_offsets(kafka_bootstrap, topics, PARTITION) == {topics.commands: 2}

        # The provider's answer for new-1, behind the earlier release's on the same
        # partition: once new-1 commits, everything before it there has been decided (a
        # decision that only records evidence may wait for the next transaction).
        confirmed = observed("a", 1, Outcome.SUCCEEDED, tx_id="new-1")
        await produce(kafka_bootstrap, topics.observations, [confirmed], PARTITION)

        async def committed() -> bool | None:
            types = await event_types(kafka_bootstrap, topics, "new-1")
            return True if "TransactionCommitted" in types else None

        await eventually(committed, "new-1 commits")

    # Nothing of the earlier release's decisions was decided again: read from offset 0, the
    # confirmation of the finished transaction would be recorded as ObservationIgnored.
    assert await event_types(kafka_bootstrap, topics, OLD) == []
    assert await changelog_offsets(kafka_bootstrap, topics, PARTITION) == {
        topics.commands: 2,
        topics.observations: 2,
    }
