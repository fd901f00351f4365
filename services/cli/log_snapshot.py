"""Reading topics from offset 0 up to the end offsets taken at the start, as an auditor does.

No consumer group (nothing is committed, no other consumer is disturbed) and
read_committed (records of aborted Kafka transactions were never part of the log).
"""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

from services.closing import stopped_with
from services.kafka_clients import connection


class AuditError(Exception):
    """The audit cannot run at all (a missing topic, a database it must not touch...)."""


def where(record: ConsumerRecord[bytes, bytes]) -> str:
    return f"{record.topic}[{record.partition}]@{record.offset}"


class LogSnapshot:
    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        ends: dict[TopicPartition, int],
        starts: dict[TopicPartition, int] | None = None,
    ) -> None:
        self._consumer = consumer
        self.ends = ends
        self.starts = starts or {tp: 0 for tp in ends}

    @property
    def total(self) -> int:
        """Upper bound of the records to read (transaction markers count as offsets)."""
        return sum(max(end - self.starts[tp], 0) for tp, end in self.ends.items())

    async def rewind(self) -> None:
        """Back to the start offsets, to read the same records again."""
        for tp, offset in self.starts.items():
            self._consumer.seek(tp, offset)

    def share(self, ends: dict[TopicPartition, int]) -> "LogSnapshot":
        """These partitions of the snapshot (a subset of its ends), read by the same
        consumer from the start offsets; rewind() on the whole snapshot still rewinds them."""
        return LogSnapshot(self._consumer, ends, {tp: self.starts[tp] for tp in ends})

    async def batches(
        self, max_records: int = 20000
    ) -> AsyncIterator[list[ConsumerRecord[bytes, bytes]]]:
        """Every committed record below the end offsets, in log order per partition."""
        remaining = {tp for tp, end in self.ends.items() if end > self.starts[tp]}
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


def _consumer(bootstrap: str) -> AIOKafkaConsumer:
    # Fetches far larger than the defaults (1 MiB a partition, 500 records a call): an
    # audit reads whole partitions, and each fetch round trip and each getmany call costs
    # as much as thousands of records (measured: twice the records per second).
    return AIOKafkaConsumer(
        **connection(bootstrap, "log-snapshot"),
        isolation_level="read_committed",
        enable_auto_commit=False,
        group_id=None,
        max_partition_fetch_bytes=8 << 20,
        fetch_max_bytes=64 << 20,
    )


@asynccontextmanager
async def open_partitions(
    bootstrap: str, starts: dict[TopicPartition, int], ends: dict[TopicPartition, int]
) -> AsyncIterator[LogSnapshot]:
    """The records of each partition from its start offset up to its end offset (one
    slice of a snapshot taken elsewhere: a window of a partition, or the partitions one
    process of a parallel audit reads)."""
    # Stopped however it ends, a start that failed part-way included (services.closing).
    async with AsyncExitStack() as stack:
        # A slice with nothing to read may stop before any loop turn since its start,
        # which aiokafka's own stop did not survive (services.kafka_consumer_stop, installed
        # by services.kafka_mends; stop_consumer's task now also gives a turn first).
        consumer = stopped_with(stack, _consumer(bootstrap))
        await consumer.start()
        consumer.assign(list(starts))
        for tp, offset in starts.items():
            consumer.seek(tp, offset)
        yield LogSnapshot(consumer, {tp: ends[tp] for tp in starts}, starts)


@asynccontextmanager
async def open_snapshot(
    bootstrap: str, topics: list[str], optional: tuple[str, ...] = ()
) -> AsyncIterator[LogSnapshot]:
    """`optional`: topics read when they exist (one an older recon never created)."""
    async with AsyncExitStack() as stack:  # as open_partitions
        consumer = stopped_with(stack, _consumer(bootstrap))
        await consumer.start()
        # consumer.topics() returns the topics without updating the consumer's own
        # metadata, which partitions_for_topic reads; aiokafka has no public call for it.
        await consumer._client.force_metadata_update()
        missing = [topic for topic in topics if not consumer.partitions_for_topic(topic)]
        if missing:
            raise AuditError(
                f"topic {', '.join(missing)} does not exist on {bootstrap} "
                "(is RECON_TOPIC_PREFIX right?)"
            )
        present = [topic for topic in optional if consumer.partitions_for_topic(topic)]
        partitions = [
            TopicPartition(topic, p)
            for topic in [*topics, *present]
            for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
        yield LogSnapshot(consumer, ends)
