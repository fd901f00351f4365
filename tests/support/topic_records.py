"""Reading a whole topic from offset 0, for tests that check what was produced."""

import json
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from events.topics import PARTITIONS

# A broker that stops answering must fail the test, not spin until the suite's timeout.
READ_TIMEOUT_S = 60


async def read_topic(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every committed record's JSON value, partition by partition, up to the end offsets
    at the time of the call."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed"
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        values: list[dict[str, Any]] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        for tp in partitions:
            while await consumer.position(tp) < ends[tp]:
                assert time.monotonic() < deadline, f"{topic} not read to {ends}"
                batch = await consumer.getmany(tp, timeout_ms=1000)
                for record in batch.get(tp, []):
                    if record.offset < ends[tp]:
                        values.append(json.loads(record.value))
        return values
    finally:
        await consumer.stop()
