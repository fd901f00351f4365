"""Reading topics from offset 0 up to the end offsets taken at the start, as an auditor does.

No consumer group (nothing is committed, no other consumer is disturbed) and
read_committed (records of aborted Kafka transactions were never part of the log).
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition


class AuditError(Exception):
    """The audit cannot run at all (a missing topic, a database it must not touch...)."""


def where(record: ConsumerRecord[bytes, bytes]) -> str:
    return f"{record.topic}[{record.partition}]@{record.offset}"


class LogSnapshot:
    def __init__(self, consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> None:
        self._consumer = consumer
        self.ends = ends

    @property
    def total(self) -> int:
        """Upper bound of the records to read (transaction markers count as offsets)."""
        return sum(self.ends.values())

    async def batches(
        self, max_records: int = 1000
    ) -> AsyncIterator[list[ConsumerRecord[bytes, bytes]]]:
        """Every committed record below the end offsets, in log order per partition."""
        remaining = {tp for tp, end in self.ends.items() if end > 0}
        while remaining:
            fetched = await self._consumer.getmany(
                *remaining, timeout_ms=1000, max_records=max_records
            )
            batch = [
                record
                for tp, records in fetched.items()
                for record in records
                if record.offset < self.ends[tp]
            ]
            for tp in list(remaining):
                if await self._consumer.position(tp) >= self.ends[tp]:
                    remaining.discard(tp)
            if batch:
                yield batch


@asynccontextmanager
async def open_snapshot(bootstrap: str, topics: list[str]) -> AsyncIterator[LogSnapshot]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        group_id=None,
    )
    await consumer.start()
    try:
        # consumer.topics() returns the topics without updating the consumer's own
        # metadata, which partitions_for_topic reads; aiokafka has no public call for it.
        await consumer._client.force_metadata_update()
        missing = [topic for topic in topics if not consumer.partitions_for_topic(topic)]
        if missing:
            raise AuditError(
                f"topic {', '.join(missing)} does not exist on {bootstrap} "
                "(is RECON_TOPIC_PREFIX right?)"
            )
        partitions = [
            TopicPartition(topic, p)
            for topic in topics
            for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
        yield LogSnapshot(consumer, ends)
    finally:
        await consumer.stop()
