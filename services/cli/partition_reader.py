"""Reading a window of one partition, for an audit that knows where a transaction is.

Every record of a transaction is keyed `tenant/tx_id` (events.keys.partition_key) and the
producers leave the partition to aiokafka's default partitioner (murmur2 of the key; the
decider, the dispatcher and the saga write to the partition of the record they read, which
that partitioner chose), so the same partitioner names the one partition of each topic the
transaction can be in. Kafka's time index (offsets_for_times) bounds the window.
No consumer group, read_committed, as log_snapshot reads.
"""

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TypeAlias

from aiokafka import AIOKafkaConsumer
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import ConsumerRecord, TopicPartition

from services.cli.log_snapshot import AuditError
from services.closing import stopped_with
from services.kafka_clients import connection

Record: TypeAlias = "ConsumerRecord[bytes, bytes]"


class PartitionReader:
    def __init__(self, consumer: AIOKafkaConsumer, bootstrap: str) -> None:
        self._consumer = consumer
        self._bootstrap = bootstrap
        self.ends: dict[TopicPartition, int] = {}
        # Records read (handed to `keep`), kept or not: what the reads cost on the loop
        # (the receipt route's recon_receipt_records_read). The fetch past a window's end
        # that Kafka returns with it (at most one fetch, max_partition_fetch_bytes) is not
        # looked at.
        self.examined = 0

    def partition_of(self, topic: str, key: bytes) -> TopicPartition:
        partitions = sorted(self._consumer.partitions_for_topic(topic) or ())
        if not partitions:
            raise AuditError(
                f"topic {topic} does not exist on {self._bootstrap} (is RECON_TOPIC_PREFIX right?)"
            )
        return TopicPartition(topic, DefaultPartitioner()(key, partitions, partitions))

    async def end(self, tp: TopicPartition) -> int:
        """The end offset, taken once: what is written later is not read."""
        if tp not in self.ends:
            self.ends.update(await self._consumer.end_offsets([tp]))
        return self.ends[tp]

    async def offset_at(self, tp: TopicPartition, timestamp_ms: int) -> int:
        """The first offset whose record is stamped at or after `timestamp_ms` (the end
        when there is none): no record at or after that time comes before it."""
        end = await self.end(tp)
        if timestamp_ms <= 0:
            return 0
        found = await self._consumer.offsets_for_times({tp: timestamp_ms})
        at = found.get(tp)
        return end if at is None else min(at.offset, end)

    async def read(
        self,
        tp: TopicPartition,
        start: int,
        stop: int | None,
        keep: Callable[[Record], bool],
        done: Callable[[Record], bool] = lambda _: False,
    ) -> tuple[list[Record], int]:
        """The records in [start, stop) (stop None: the end) that `keep` keeps, up to and
        including the first kept one that is `done`; and the offset reading stopped at."""
        stop = await self.end(tp) if stop is None else min(stop, await self.end(tp))
        kept: list[Record] = []
        if start >= stop:
            return kept, start
        self._consumer.assign([tp])
        self._consumer.seek(tp, start)
        position = start
        while position < stop:
            fetched = await self._consumer.getmany(tp, timeout_ms=1000, max_records=20000)
            for record in fetched.get(tp, []):
                if record.offset >= stop:
                    break
                self.examined += 1
                if keep(record):
                    kept.append(record)
                    if done(record):
                        return kept, record.offset + 1
            position = await self._consumer.position(tp)
        return kept, position


@asynccontextmanager
async def open_reader(bootstrap: str, topics: list[str]) -> AsyncIterator[PartitionReader]:
    consumer = AIOKafkaConsumer(
        **connection(bootstrap, "log-reader"),
        isolation_level="read_committed",
        enable_auto_commit=False,
        group_id=None,
        # Only records already written are read: a fetch at a partition's end must come
        # back at once, not after the default 500 ms long poll, which each new window's
        # seek would otherwise wait out behind the fetch in flight.
        fetch_max_wait_ms=10,
    )
    # Stopped however it ends, a start that failed part-way included (services.closing).
    async with AsyncExitStack() as stack:
        stopped_with(stack, consumer)
        await consumer.start()
        # The consumer's own metadata, which partitions_for_topic reads, for these topics
        # (it tracks only the topics it was told of; aiokafka has no public call for it).
        await consumer._client.set_topics(topics)
        yield PartitionReader(consumer, bootstrap)
