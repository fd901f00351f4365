"""aiokafka's transactional producer against the real broker started by services.devtools.infra.

recon's exactly-once pipeline (consume, produce, commit offsets atomically) rests on these
guarantees, so they are checked on the broker version the project pins.
"""

from __future__ import annotations

import asyncio
import gc

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced

TIMEOUT_S = 60.0


async def create_topics(bootstrap: str, *names: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, num_partitions=1, replication_factor=1) for name in names]
        )
    finally:
        await admin.close()


def transactional_producer(bootstrap: str, transactional_id: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        enable_idempotence=True,
    )


async def read_values(
    bootstrap: str, topic: str, count: int, *, isolation_level: str = "read_committed"
) -> list[bytes]:
    """The first `count` values of the single-partition `topic`, read from offset 0."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        async with asyncio.timeout(TIMEOUT_S):
            while len(values) < count:
                batches = await consumer.getmany(timeout_ms=500)
                values += [record.value for records in batches.values() for record in records]
        return values
    finally:
        await consumer.stop()


async def test_consume_transform_produce_commits_offsets_atomically(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    source, sink, group = f"{topic_prefix}in", f"{topic_prefix}out", f"{topic_prefix}group"
    await create_topics(kafka_bootstrap, source, sink)

    plain = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await plain.start()
    try:
        for value in (b"a", b"b", b"c"):
            await plain.send_and_wait(source, value)
    finally:
        await plain.stop()

    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = transactional_producer(kafka_bootstrap, f"{topic_prefix}worker")
    await consumer.start()
    await producer.start()
    try:
        consumed: list[bytes] = []
        async with asyncio.timeout(TIMEOUT_S):
            while len(consumed) < 3:
                batches = await consumer.getmany(timeout_ms=500)
                if not batches:
                    continue
                async with producer.transaction():
                    for records in batches.values():
                        for record in records:
                            consumed.append(record.value)
                            await producer.send(sink, record.value.upper())
                    offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
                    await producer.send_offsets_to_transaction(offsets, group)
        assert consumed == [b"a", b"b", b"c"]
    finally:
        await producer.stop()
        await consumer.stop()

    assert await read_values(kafka_bootstrap, sink, 3) == [b"A", b"B", b"C"]
    # The consumer never committed; the group's offset comes from the producer's transaction.
    assert await committed_offset(kafka_bootstrap, group, TopicPartition(source, 0)) == 3


async def committed_offset(bootstrap: str, group: str, tp: TopicPartition) -> int:
    """The group's committed offset once it is stable.

    The coordinator writes the commit markers after EndTxn has returned, so right after
    commit_transaction() the offset can still be pending and reads as absent.
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                offset = await consumer.committed(tp)
                if offset is not None:
                    return int(offset)
                await asyncio.sleep(0.1)
    finally:
        await consumer.stop()


async def test_aborted_transaction_is_invisible_to_read_committed(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}events"
    await create_topics(kafka_bootstrap, topic)
    producer = transactional_producer(kafka_bootstrap, f"{topic_prefix}tx")
    await producer.start()
    try:
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aborted-1")
        await producer.send_and_wait(topic, b"aborted-2")
        await producer.abort_transaction()

        async with producer.transaction():
            await producer.send_and_wait(topic, b"committed")
    finally:
        await producer.stop()

    assert await read_values(kafka_bootstrap, topic, 1) == [b"committed"]
    # The aborted records did reach the log: only the isolation level hides them.
    uncommitted = await read_values(kafka_bootstrap, topic, 3, isolation_level="read_uncommitted")
    assert uncommitted == [b"aborted-1", b"aborted-2", b"committed"]


async def test_second_producer_with_same_transactional_id_fences_the_first(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}fenced"
    transactional_id = f"{topic_prefix}same-id"
    await create_topics(kafka_bootstrap, topic)
    second = transactional_producer(kafka_bootstrap, transactional_id)
    try:
        await write_as_zombie(kafka_bootstrap, transactional_id, topic, fenced_by=second)
        async with second.transaction():
            await second.send_and_wait(topic, b"second")
    finally:
        await second.stop()
    # After fencing, aiokafka leaves internal futures holding ProducerFenced that nobody
    # awaits. Collect them here: finalizers that run later, in the middle of an ast.parse
    # of pytest's assertion rewriting, trip a CPython 3.11.7 bug ("AST constructor
    # recursion depth mismatch") and crash the whole test session.
    gc.collect()

    assert await read_values(kafka_bootstrap, topic, 2) == [b"first-before", b"second"]


async def write_as_zombie(
    bootstrap: str, transactional_id: str, topic: str, *, fenced_by: AIOKafkaProducer
) -> None:
    """Commit once, let `fenced_by` take over the transactional id, then fail to write."""
    first = transactional_producer(bootstrap, transactional_id)
    await first.start()
    try:
        async with first.transaction():
            await first.send_and_wait(topic, b"first-before")

        # Starting the second producer bumps the epoch of the shared transactional id.
        await fenced_by.start()

        with pytest.raises((ProducerFenced, InvalidProducerEpoch)):
            async with asyncio.timeout(TIMEOUT_S):
                await first.begin_transaction()
                await first.send_and_wait(topic, b"zombie")
                await first.commit_transaction()
    finally:
        await first.stop()
