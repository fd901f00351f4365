"""Reading a whole topic from offset 0, for tests that check what was produced: the one
reader every test and helper uses."""

import json
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from events.topics import PARTITIONS

# A broker that stops answering must fail the test, not spin until the suite's timeout.
READ_TIMEOUT_S = 60


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
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
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
