"""One policy for recon's at-least-once consumers (the saga orchestrator and the Kafka
intents reader): when offsets are committed, what is read again, what survives a
rebalance, where poison goes.

The promise: an input is committed only after everything it caused is acknowledged by Kafka,
so a crash or a failed send means the input is read again (whoever owns it then), and
handlers are written to be harmless when run twice (stable keys, lookups before applying,
deterministic command ids).

- Commit: after a batch is handled, its next offsets are pending; they are committed (at
  most once per COMMIT_INTERVAL_S while batches keep coming, at once when a poll finds
  nothing, and on a clean stop) for the partitions this member still owns (a revoked
  partition's are dropped: committing them raises, and they are the new owner's to
  commit), and also when partitions are revoked, so a clean hand-over re-reads as little
  as possible.
- Revocation: a commit refused because the group rebalanced (`CommitFailedError`,
  `RebalanceInProgressError`, `IllegalStateError` for a partition that is gone) is not a
  failure of the work; the new owner reads from the last committed offset again. Nothing is
  rewound on a partition this member no longer owns.
- Failure: a Kafka error while handling (a send not acknowledged) rewinds the batch's
  partitions that are still owned to the batch's first offsets, tells the handler
  (`on_rewind`, so it can treat what it reads again as redelivered), and backs off. A commit
  that fails for another reason keeps the offsets pending for the next commit.
- Poison: an unreadable record is sent to the dead-letter topic with the shared headers
  (events.dead_letters) and acknowledged; the consumer moves on.

Kept on aiokafka rather than FastStream's subscriber: see README, "At-least-once consumers".
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaError,
    RebalanceInProgressError,
)

from events.dead_letters import dead_letter_headers
from services.config import Settings
from services.kafka_clients import group_consumer, stop_consumer
from services.kafka_start import start_kafka_client
from services.metrics import dead_lettered, observe_lag
from services.pending_offsets import PendingOffsets
from services.reader_batching import wait_before_next_fetch

log = logging.getLogger(__name__)

Batch = dict[TopicPartition, list[ConsumerRecord]]
PartitionsHook = Callable[[set[TopicPartition]], Awaitable[None]]


class RetryBatch(Exception):
    """Raised by a handler: something it needs (not Kafka) is unavailable; read the batch
    again after a back-off instead of acting without it."""


# The group moved on under this member: the work is done, the commit is the new owner's.
HANDED_OVER = (CommitFailedError, RebalanceInProgressError, IllegalStateError)
RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)
# While batches keep coming, pending offsets are committed at most this often (a commit is
# a Kafka request and a write to __consumer_offsets; per batch it was a large share of
# Kafka's CPU per transaction); at once when a poll finds nothing, on revocation and on a
# clean stop. A crash re-reads at most this much more: handlers are safe to run twice.
COMMIT_INTERVAL_S = 1.0
# The longest a commit may take. aiokafka retries a commit for as long as the group's
# coordinator cannot be reached, so a broker that answers nothing (frozen, behind a firewall
# that drops packets) held the loop, and a clean stop's last commit, without end. A commit
# given up is a commit that failed: the offsets stay pending (the loop sends them with the
# next), and if none follows the partition's next owner reads them again. Far above a
# loaded broker's commit (milliseconds; a coordinator moving takes seconds).
COMMIT_TIMEOUT_S = 5.0


class AtLeastOnceConsumer:
    def __init__(
        self,
        settings: Settings,
        group: str,
        topics: list[str],
        producer: AIOKafkaProducer,
        *,
        role: str,
        max_records: int,
        on_assigned: PartitionsHook | None = None,
        on_rewind: Callable[[Batch], None] | None = None,
        batch_wait_s: float = 0.0,
    ) -> None:
        self.group = f"{settings.group_prefix}{group}"
        self.topics = topics
        self.dead_letter_topic = settings.topics.dead_letters
        self.producer = producer
        self.max_records = max_records
        self.on_assigned = on_assigned
        self.on_rewind = on_rewind
        # After a large fetch, wait this long before the next (services.reader_batching).
        self.batch_wait_s = batch_wait_s
        # read_committed: an aborted decision is never acted on.
        self.consumer = group_consumer(settings, group, role)
        # Next offsets of handled batches, not yet committed.
        self.pending = PendingOffsets(self.consumer)
        self.failures = 0

    def owns(self, tp: TopicPartition) -> bool:
        """Still this member's: a handler may skip starting work on a revoked partition
        (the new owner does it), never needs to."""
        return tp in self.consumer.assignment()

    async def dead_letter(self, tp: TopicPartition, record: ConsumerRecord, reason: str) -> None:
        """Set a record nobody can read aside, acknowledged before its offset is committed."""
        log.error("dead-lettering %s:%d@%d: %s", tp.topic, tp.partition, record.offset, reason)
        dead_lettered(reason)
        await self.producer.send_and_wait(
            self.dead_letter_topic,
            value=record.value,
            key=record.key,
            headers=dead_letter_headers(reason, tp.topic, tp.partition, record.offset, self.group),
        )

    async def run(self, stop: asyncio.Event, handle: Callable[[Batch], Awaitable[None]]) -> None:
        self.consumer.subscribe(self.topics, listener=_Listener(self))
        fetched = 0
        try:
            # In the try: a start that failed, or gave up on `stop`, leaves a consumer to
            # stop as well (services.closing).
            if not await start_kafka_client(self.consumer, f"consumer {self.group}", stop):
                return
            while not stop.is_set():
                wait = wait_before_next_fetch(fetched, self.batch_wait_s)
                if wait:
                    await asyncio.sleep(wait)  # a backlog: let the next batch gather more
                batch = await self.consumer.getmany(timeout_ms=500, max_records=self.max_records)
                batch = {tp: records for tp, records in batch.items() if records}
                fetched = sum(len(records) for records in batch.values())
                await observe_lag(self.consumer, self.group, batch)
                try:
                    if batch:
                        await handle(batch)
                    elif not self.pending:
                        continue
                except (KafkaError, RetryBatch) as error:
                    # Something the batch caused did not reach Kafka, or something it
                    # needs did not answer: read it again.
                    log.warning("batch failed (%r); reading it again", error)
                    self.rewind(batch)
                    await self._back_off(stop)
                    continue
                self.pending.note({tp: records[-1].offset + 1 for tp, records in batch.items()})
                if batch:
                    self.failures = 0
                    if not self.pending.due(COMMIT_INTERVAL_S):
                        continue
                if stop.is_set():
                    continue  # the stop's own commit sends them, once (`_commit_at_stop`)
                try:
                    await self.commit_pending()
                except (KafkaError, TimeoutError) as error:
                    # The work is durable; only the position is not. Kept pending and
                    # committed with the next batch (a crash meanwhile re-reads: harmless).
                    log.warning("commit failed (%r); retrying with the next batch", error)
                    await self._back_off(stop)
                    continue
                self.failures = 0
            await self._commit_at_stop()
        finally:
            await stop_consumer(self.consumer)

    async def _commit_at_stop(self) -> None:
        """A clean stop hands over what is done: its offsets committed, so that the
        partitions' next owners start after it. Given up past COMMIT_TIMEOUT_S or on an
        error, as a crash would leave them: at-least-once, the next owner reads these
        records again and its handlers are harmless twice."""
        try:
            await self.commit_pending()
        except (KafkaError, TimeoutError) as error:
            log.warning(
                "%s: offsets of %d partitions not committed at the stop (%r); the next "
                "owner reads them again from the last committed offsets",
                self.group,
                len(self.pending.offsets),
                error,
            )

    async def commit_pending(self, only: set[TopicPartition] | None = None) -> None:
        """Commit pending offsets of partitions still owned (of `only`, if given), within
        COMMIT_TIMEOUT_S; a rebalance under the commit is logged and dropped, other Kafka
        errors and the timeout raise."""
        try:
            await self.pending.commit(only, COMMIT_TIMEOUT_S)
        except HANDED_OVER as error:
            # Not an error of the work: whoever owns these partitions now reads from the
            # last committed offset, and handlers are safe to run twice.
            log.info("commit skipped, the group rebalanced (%r)", error)
            self.pending.forget(only)

    def rewind(self, batch: Batch) -> None:
        owned = self.consumer.assignment()
        kept = {tp: records for tp, records in batch.items() if tp in owned}
        if self.on_rewind is not None:
            self.on_rewind(kept)
        for tp, records in kept.items():
            # No await since the ownership check: the assignment cannot change in between.
            self.consumer.seek(tp, records[0].offset)

    async def _back_off(self, stop: asyncio.Event) -> None:
        delay = RETRY_BACKOFF_S[min(self.failures, len(RETRY_BACKOFF_S) - 1)]
        self.failures += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: AtLeastOnceConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        # Still the owner until this returns: commit what is done, so the next owner
        # repeats as little as possible.
        try:
            await self.owner.commit_pending(only=revoked)
        except (KafkaError, TimeoutError) as error:
            log.warning("commit on revocation failed (%r); the next owner reads again", error)
        self.owner.pending.forget(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if self.owner.on_assigned is not None and assigned:
            await self.owner.on_assigned(assigned)
