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


async def partition_counts(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Each topic's partition count as the broker describes it (RECON_KAFKA_PARTITIONS);
    a topic just created is asked for again until its partitions are known."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            counts = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(topics)}
            if all(counts.get(topic) for topic in topics):
                return counts
            assert time.monotonic() < deadline, f"no partitions known for {topics}: {counts}"
            await asyncio.sleep(0.1)
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
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=isolation,
        # Room for a record over Kafka's default 1 MiB (the decider's oversized inputs).
        max_partition_fetch_bytes=2 * 1024 * 1024,
    )
    await consumer.start()
    try:
        count = (await partition_counts(bootstrap, [topic]))[topic]
        partitions = [TopicPartition(topic, p) for p in range(count)]
        consumer.assign(partitions)
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


async def read_topic(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every committed record's JSON value, partition by partition."""
    return [json.loads(r.value or b"") for r in await read_records(bootstrap, topic)]
