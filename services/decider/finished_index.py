"""Where the decider finds a finished transaction's marker: on the changelog itself.

A marker as a Python object weighs ~6.7 KB (pydantic models, enums, tuples of legs); kept
in memory for every finished transaction, the decider grew by that much per transaction
of history, for ever (6.7 GB at a million). What must stay in memory is only that the
transaction finished, so that a late duplicate of its SubmitTransaction starts nothing,
and where its marker is: its Kafka key and the marker's offset on the changelog, ~110
bytes. The marker itself is read back from that offset when a late input arrives for
the transaction, which is rare except shortly after it finished (the provider's webhook
for the last notification): the most recently finished or read markers stay in memory.

The changelog's latest record per key is never compacted away, so the offset stays
readable as long as it is the latest; a new marker or state for the key replaces the
offset here in the same step as it is written.

A marker is recognised on restore by its first bytes, not parsed (a million pydantic
validations would cost ~17 s of restore); one that turns out unreadable when read back
stops the decider with CorruptChangelog, as an unreadable record on restore does.
"""

import asyncio
import contextlib
import time
from collections import OrderedDict

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from services.decider.restore import CorruptChangelog
from services.kafka_clients import connection, stop_consumer
from transactions.finished import FinishedTransaction

# How long reading one marker back may take (a broker away) before the batch is failed.
READ_TIMEOUT_S = 30.0

# Markers kept in memory per partition: those that finished last are the ones late
# webhooks and replies arrive for. 1024 x ~6.7 KB = ~7 MB per partition.
RECENT_MARKERS = 1024


class ChangelogReader:
    """Reads single records of the decider's changelog by offset (one consumer per
    process, no group, read_committed: a marker is only ever read after its transaction
    committed). Paused between reads, so it fetches nothing in the background."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.consumer = self._consumer()
        self.started = False
        # The decider's partitions decide concurrently: one read at a time on the consumer.
        self.lock = asyncio.Lock()

    def _consumer(self) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            **connection(self.bootstrap, "decider-changelog"),
            isolation_level="read_committed",
            enable_auto_commit=False,
            group_id=None,
            fetch_max_wait_ms=10,  # the record is there: never wait out a long poll
            # An offset that is gone raises (a KafkaError: the decider restores the
            # partition and reads its inputs again) instead of jumping to the end.
            auto_offset_reset="none",
        )

    async def read(self, partition: int, offset: int) -> bytes:
        async with self.lock:
            return await self._read(partition, offset)

    async def _read(self, partition: int, offset: int) -> bytes:
        tp = TopicPartition(self.topic, partition)
        if not self.started:
            try:
                await self.consumer.start()
            except Exception:
                # The batch fails and the decider reads it again, and this read again: but
                # aiokafka keeps what a failed start opened and refuses to start a consumer
                # whose fetcher exists ("Did you call `start` twice?", an AssertionError that
                # ended the process). The next read starts a consumer of its own.
                failed, self.consumer = self.consumer, self._consumer()
                with contextlib.suppress(Exception):  # the start's error is the one to tell
                    await stop_consumer(failed)
                raise
            self.started = True
        if self.consumer.assignment() != {tp}:
            self.consumer.assign([tp])
        self.consumer.seek(tp, offset)
        self.consumer.resume(tp)
        deadline = time.monotonic() + READ_TIMEOUT_S
        try:
            while True:
                if time.monotonic() > deadline:
                    # Handled as any Kafka failure of a batch: restore, read again. Never
                    # a wait without end while the decider holds its partitions.
                    raise TimeoutError(f"{self.topic}:{partition}@{offset} not read in time")
                fetched = await self.consumer.getmany(tp, timeout_ms=1000, max_records=1)
                for record in fetched.get(tp, []):
                    value: bytes | None = record.value
                    if record.offset == offset and value is not None:
                        return value
                    raise CorruptChangelog(
                        f"{self.topic}:{partition}@{offset} holds no marker "
                        f"(the next record is at {record.offset})"
                    )
        finally:
            self.consumer.pause(tp)

    async def stop(self) -> None:
        # Also when it never started (no marker was read): a consumer made and never
        # stopped is logged at ERROR as unclosed when it is collected.
        await stop_consumer(self.consumer)


class FinishedIndex:
    """One owned partition's finished transactions: Kafka key -> marker offset, and the
    markers used last."""

    def __init__(self, reader: ChangelogReader, partition: int, offsets: dict[bytes, int]):
        self.reader = reader
        self.partition = partition
        self.offsets = offsets
        self.recent: OrderedDict[bytes, FinishedTransaction] = OrderedDict()

    def __len__(self) -> int:
        return len(self.offsets)

    async def get(self, key: bytes) -> FinishedTransaction | None:
        offset = self.offsets.get(key)
        if offset is None:
            return None
        marker = self.recent.get(key)
        if marker is None:
            raw = await self.reader.read(self.partition, offset)
            try:
                marker = FinishedTransaction.model_validate_json(raw)
            except ValidationError as error:
                raise CorruptChangelog(
                    f"{self.reader.topic}:{self.partition}@{offset} (key {key!r}) cannot be "
                    f"read: {error}"
                ) from error
        self._remember(key, marker)
        return marker

    def put(self, key: bytes, marker: FinishedTransaction, offset: int) -> None:
        self.offsets[key] = offset
        self._remember(key, marker)

    def _remember(self, key: bytes, marker: FinishedTransaction) -> None:
        self.recent[key] = marker
        self.recent.move_to_end(key)
        while len(self.recent) > RECENT_MARKERS:
            self.recent.popitem(last=False)
