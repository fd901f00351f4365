"""Reading a whole topic from offset 0, for tests that check what was produced: the one
reader every test and helper uses."""

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

# A broker that stops answering must fail the test, not spin until the suite's timeout.
READ_TIMEOUT_S = 60
# How old a reader's metadata may grow before it asks again (aiokafka's default: 5 minutes).
METADATA_AGE_MS = 500


async def described_topics(
    admin: AIOKafkaAdminClient, names: list[str]
) -> dict[str, dict[str, Any]]:
    """Each topic as the broker describes it (its partitions, their replicas), asked again
    until every one has its partitions: a topic just created can be described before the
    broker's metadata holds them (KRaft propagates them a moment later)."""
    deadline = time.monotonic() + READ_TIMEOUT_S
    while True:
        described = {t["topic"]: t for t in await admin.describe_topics(names)}
        if all(described.get(name, {}).get("partitions") for name in names):
            return described
        assert time.monotonic() < deadline, f"no partitions known for {names}: {described}"
        await asyncio.sleep(0.1)


async def partition_counts(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Each topic's partition count as the broker describes it (RECON_KAFKA_PARTITIONS)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await described_topics(admin, topics)
        return {topic: len(described[topic]["partitions"]) for topic in topics}
    finally:
        await admin.close()


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


async def read_records(
    bootstrap: str, topic: str, isolation: str = "read_committed"
) -> list[Record]:
    """Every record of `topic` up to its end offsets at the time of the call, partition by
    partition, with its position. read_uncommitted also shows the records of open and
    aborted Kafka transactions (and stops at the high watermark); read_committed stops at
    the last stable offset, before the first open transaction."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        # Without a group, aiokafka resets a new assignment's positions by this (as for a
        # group with no commit), maybe after the seek below: both go to the beginning.
        auto_offset_reset="earliest",
        isolation_level=isolation,
        # Room for a record over Kafka's default 1 MiB (the decider's oversized inputs).
        max_partition_fetch_bytes=2 * 1024 * 1024,
        # Subscribed without a group, the consumer is assigned every partition its own
        # metadata lists (its start waits for the topic's): no admin client to ask. A topic
        # known before its partitions are is looked up again within this.
        metadata_max_age_ms=METADATA_AGE_MS,
    )
    await consumer.start()
    try:
        partitions = await _every_partition(consumer, topic)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        found: list[Record] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        for tp in partitions:
            while await consumer.position(tp) < ends[tp]:
                assert time.monotonic() < deadline, f"{topic} not read to {ends}"
                batch = await consumer.getmany(tp, timeout_ms=1000)
                found += [
                    Record(tp.partition, r.offset, r.key, r.value, dict(r.headers))
                    for r in batch.get(tp, [])
                    if r.offset < ends[tp]
                ]
        return found
    finally:
        await consumer.stop()


async def _every_partition(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    deadline = time.monotonic() + READ_TIMEOUT_S
    while not consumer.assignment():
        assert time.monotonic() < deadline, f"no partitions known for {topic}"
        await asyncio.sleep(0.05)
    return sorted(consumer.assignment())


async def read_topic(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every committed record's JSON value, partition by partition."""
    return [json.loads(r.value or b"") for r in await read_records(bootstrap, topic)]
