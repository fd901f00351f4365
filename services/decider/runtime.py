"""The decider's Kafka runtime.

Consumes recon.commands and recon.observations, runs the pure state machine, and
produces the resulting events, the new state and the consumed offsets (both on the
changelog, services.decider.input_offsets) in ONE Kafka transaction per partition and
batch. Either all of it is visible to read_committed readers, or none of it is and the
inputs are read again. The consumer group's offsets are only a lag marker
(services.decider.lag_marker). Inputs whose
decisions only record evidence stay staged and join the partition's next transaction
(services.decider.group_commit).

The loop never waits for a commit. Each partition's transaction runs in its own task while
the loop goes on fetching and deciding: an input of partition p is decided when it arrives,
not after q's commit, and inputs of p that arrive while p's transaction is on the wire are
decided on that transaction's states and staged for p's next one, which starts as soon as
it ends. So under load one transaction carries what arrived during the one before it;
idle, it carries one input and starts at once. One transaction per partition at a time, in
order: the staged inputs' offsets come after the open transaction's, and a failure of the
open one forgets what was decided on it (the partition is restored from the log and reads
its inputs again from the committed offsets).

aiokafka has no KIP-447 (fencing by consumer group metadata), so each input partition
has its own transactional producer, `recon-decider-<p>`: whoever takes partition p
initialises that transactional id, which fences the previous owner's epoch and aborts
its open transaction. The range assignor gives one decider partition p of both input
topics together, so no two deciders ever write one transaction.

One input must never stall its partition (and every tenant on it). An input that can
never be decided (unreadable, a decision that raises, records over MAX_RECORD_BYTES) is
dead-lettered with its reason in the same transaction as the other inputs' decisions. If
Kafka still refuses a record for its size, the batch is replayed one input per
transaction to find the input that cannot be written, and that input is dead-lettered.
Only transient errors restore and retry. A partition the decider cannot restore (a
changelog record it cannot read) stops the process: a member that keeps a partition it
does not serve would stall it silently.
"""

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import IllegalOperation, KafkaError, ProducerFenced
from pydantic import ValidationError

from events.checkpoint import CheckpointChain, Head
from events.dead_letters import dead_letter_headers
from events.event_type_header import event_type_header
from events.inputs import DeciderInput, OperationObserved, parse_input
from events.keys import partition_key
from events.safe_json import holds_nul
from services import consumer_groups, tracing
from services.closing import stop_each
from services.collector import tune_for_service
from services.config import Settings
from services.crash_points import (
    DECIDER_AFTER_COMMIT,
    DECIDER_IN_OPEN_TRANSACTION,
    DECIDER_WITH_PIPELINED_INPUTS,
    DECIDER_WITH_STAGED_INPUTS,
    armed,
    pause_point,
)
from services.decider.checkpoints import UnsignedHeads, checkpoint_records
from services.decider.dispatch_host import Answer, DispatchHost
from services.decider.dispatch_log import log_dispatches
from services.decider.finished_index import ChangelogReader, FinishedIndex
from services.decider.group_commit import interval, next_start, nobody_waits, spacing_bound
from services.decider.input_offsets import group_offsets, start_offset
from services.decider.lag_marker import LagMarker
from services.decider.restore import StateKey, Stored, restore_partition
from services.decider.staged import Staged
from services.dispatcher.call_fence import Fence
from services.dispatcher.dispatch_order import dispatch_orders
from services.inline_answers import INLINE_HEADER, inline_answer
from services.kafka_clients import (
    RECORD_REFUSED,
    acked_producer,
    group_consumer,
    stop_consumer,
    stop_producer,
    transaction_failure,
)
from services.kafka_cluster_id import cluster_id
from services.kafka_setup import ensure_recon_topics
from services.kafka_start import start_kafka_client
from services.logging_json import log_context
from services.metrics import (
    DECIDER_INPUT_WAIT_SECONDS,
    DECIDER_INPUTS_COMMITTED,
    DECIDER_TRANSACTION_SECONDS,
    DECIDER_TRANSACTIONS,
    dead_lettered,
    labelled,
    observe_lag,
)
from services.signing_keys import signing_key
from transactions.finished import FinishedTransaction, keep, revive
from transactions.state import TransactionState
from transactions.transaction import handled, initial_state, is_terminal

log = logging.getLogger(__name__)
_FENCED = "fenced on partition %d: another decider owns it now"
_FENCED_ALONE = "fenced on partition %d: dropped it, asking the group who owns it"

# A partition's Kafka transaction that has not ended this long after it started is given up
# and the partition restored (`_settle`), and a hand-over waits no longer for it (`_ended`).
# Seen in CI with a broker killed under load: a transaction's produce retried against the
# dead leader and then never ended, no error, no timeout, and its partition stalled for
# good while the others went on (every later input of it, the reconciler's lookups
# included, waited behind it). Far above a leader's or a coordinator's failover (seconds),
# below the transaction timeout Kafka aborts an open transaction after (aiokafka's 60 s).
# The cause found for that run (services/kafka_uvloop.py, mended there) is not the only way
# a sender can wait for good: this stays the bound on any of them.
TRANSACTION_DEADLINE_S = 30.0

# Kafka refuses a record over ~1 MiB (message.max.bytes, the producer's max_request_size).
# Every record the decider writes (key and value) stays under half of that, so that
# headers, batch overhead or a broker configured somewhat lower never make a decision
# unwritable. An input whose decision would exceed it is dead-lettered, never retried.
MAX_RECORD_BYTES = 512 * 1024

# The longest a revocation waits for the commit of a partition's staged decisions
# (Decider.hand_over): well inside the group's rebalance timeout, over a loaded broker's
# transaction (~0.1-1 s at c30 here).
HAND_OVER_S = 5.0

Origin = tuple[str, int, int]  # topic, partition, offset of an input


@dataclass
class OwnedPartition:
    producer: AIOKafkaProducer
    # Live transactions' full states.
    states: dict[StateKey, TransactionState]
    # Finished transactions: where their markers are.
    finished: FinishedIndex
    # Per input partition, the offset of the next input to decide. A batch fetched while
    # the partition was being (re)taken can be handed out before the seek to the
    # committed offsets and again after it: what is below this was decided already.
    next_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    # The chain heads written here and not signed yet (services.decider.checkpoints).
    unsigned: UnsignedHeads = field(default_factory=lambda: UnsignedHeads(1.0))
    # The last checkpoint written here, which the next one names (memory only: a partition
    # taken again starts a new chain).
    checkpoints: CheckpointChain = field(default_factory=CheckpointChain)
    # Decisions made and not committed yet: forgotten with the rest of this memory when the
    # partition is dropped, and then read again from the committed offsets.
    staged: "Staged | None" = None
    # The transaction on the wire (the staged decisions were decided on its states) and the
    # task that commits it; the loop handles its failure once it ends.
    committing: "Staged | None" = None
    task: "asyncio.Task[None] | None" = None
    # Per observations partition, the offset after the last answer read back and skipped
    # (decided inline when it was written): committed with the partition's next transaction,
    # never in one of its own. Lost with the partition's memory: read again, skipped again.
    read_past: dict[TopicPartition, int] = field(default_factory=dict)
    # Which of the decider's retakes this is, counted once its seeks are done (Decider._fetch).
    taken: int = 0
    # When the partition's last transaction ended and how long it took (group_commit.next_start).
    ended_at: float = 0.0
    took_s: float = 0.0
    # When the task on the wire started (TRANSACTION_DEADLINE_S).
    task_began: float = 0.0

    def stored(self, key: StateKey) -> "Stored | None":
        """A transaction's latest decided state: staged, on the wire, or committed."""
        for batch in (self.staged, self.committing):
            if batch is not None and key in batch.changes:
                return batch.changes[key]
        return self.states.get(key)


class PoisonInput(Exception):
    """The one input of a single-input transaction that Kafka refused to write."""

    def __init__(self, origin: Origin, reason: str) -> None:
        super().__init__(f"{origin}: {reason}")
        self.origin = origin
        self.reason = reason


class DeciderHalted(Exception):
    """The decider cannot serve a partition it was given; the process must stop."""


class Decider:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.group_id = f"{settings.group_prefix}{consumer_groups.DECIDER}"
        self.owned: dict[int, OwnedPartition] = {}
        # Held while a batch is processed and while partitions change hands, so a
        # revoked partition is never written after its revocation returns.
        self.lock = asyncio.Lock()
        self.consumer = group_consumer(
            settings,
            consumer_groups.DECIDER,
            "decider-inputs",
            partition_assignment_strategy=(RangePartitionAssignor,),
        )
        # Partitions whose last transaction Kafka refused for a record's size: their next
        # batch runs one input per transaction, to find the input that cannot be written.
        self.isolating: set[int] = set()
        # Inputs found that way, and why: dead-lettered when read again. Kept across a
        # retake (which re-reads them), forgotten when the partition is revoked.
        self.poison: dict[Origin, str] = {}
        # Set when a partition could not be taken; the run loop stops on it (aiokafka
        # only logs an exception raised in a rebalance listener).
        self.failure: BaseException | None = None
        self.changelog_reader = ChangelogReader(settings.kafka_bootstrap, self.topics.decider_state)
        # Read at start-up: outside dev and test a missing key stops the process here.
        self.signing_key = signing_key(settings.environment)
        self.group_commit_s = settings.decider_group_commit_s
        # Records the last fetch brought: the staged decisions' wait grows with it.
        self.fetched = 0
        # The group's committed offsets, for lag tools only: the position is on the changelog.
        self.lag_marker = LagMarker(self.consumer)
        # Set when a partition's transaction ends: the loop stops waiting for input to
        # handle its outcome and start the partition's next.
        self.woken = asyncio.Event()
        # The fetch the loop waits on (kept across wake-ups), and the takes before it began:
        # a partition taken since may have records in it from before the take's seek.
        self.fetching: asyncio.Future[dict[TopicPartition, list[ConsumerRecord]]] | None = None
        self.takes = 0
        self.fetch_began = 0
        self.waking: asyncio.Future[Any] | None = None  # waits on `woken`, kept likewise
        # The provider calls of committed dispatches, and their answers waiting for the loop
        # (services.decider.dispatch_host).
        self.host = DispatchHost(settings, lambda: self.owned, self._answered, self._current)
        self.answers: list[Answer] = []

    # --- ownership -----------------------------------------------------------------

    def transactional_producer(self, partition: int) -> AIOKafkaProducer:
        """The partition's producer; started, it fences the partition's previous owner."""
        return acked_producer(
            self.settings,
            "decider-transactions",
            transactional_id=f"{self.topics.prefix}recon-decider-{partition}",
            # One batch per partition per transaction: with aiokafka's 16 KiB default a
            # few states filled a batch, and a send meeting a full batch waits for it to
            # be written, so the sender split a transaction into two or three rounds of
            # AddPartitionsToTxn, the broker's verification and Produce (1.5 Produce per
            # transaction at c30 instead of 1). No batch exceeds the largest record the
            # decider may write, so a topic that takes every record takes every batch.
            max_batch_size=MAX_RECORD_BYTES,
        )

    async def take(self, partition: int) -> dict[TopicPartition, int]:
        """Fences the partition's previous owner and restores its state; returns the input
        offsets the changelog holds (services.decider.input_offsets)."""
        producer = self.transactional_producer(partition)
        try:
            # In the try: a start whose init_transactions failed keeps its connections.
            await producer.start()  # init_transactions: fences the previous owner
            # ...in Kafka; its calls' claims are fenced by the same token in Postgres.
            self.host.fenced(partition, await producer_fence(producer))
            restored = await restore_partition(
                self.settings.kafka_bootstrap, self.topics.decider_state, partition
            )
            if restored.legacy:
                sends = {}
                async with producer.transaction():
                    for key in sorted(restored.legacy):
                        marker = restored.legacy[key].model_dump_json().encode()
                        kafka_key = partition_key(*key)
                        sends[kafka_key] = await producer.send(
                            self.topics.decider_state,
                            value=marker,
                            key=kafka_key,
                            partition=partition,
                        )
                for kafka_key, sent in sends.items():
                    restored.finished[kafka_key] = (await sent).offset
                log.info(
                    "partition %d: %d finished states rewritten as markers",
                    partition,
                    len(restored.legacy),
                )
        except BaseException:
            await _stop_quietly(producer)
            raise
        finished = FinishedIndex(self.changelog_reader, partition, restored.finished)
        self.owned[partition] = OwnedPartition(
            producer,
            restored.states,
            finished,
            unsigned=UnsignedHeads(self.settings.checkpoint_interval_s),
        )
        log.info(
            "took partition %d with %d transactions (%d live, %d finished)",
            partition,
            restored.live + len(finished),
            restored.live,
            len(finished),
        )
        return restored.offsets

    async def drop(self, partition: int) -> None:
        owned = self.owned.pop(partition, None)
        if owned is not None:
            try:
                if owned.task is not None:
                    # Its transaction ends (commits or fails) before the producer stops:
                    # after a revocation returns, nothing of ours is still being written.
                    await _ended(owned)
                    _outcome(partition, owned.task)
            finally:
                # Also when the wait is cancelled (a revocation the consumer's bounded
                # stop cut off): the partition is no longer in `owned`, so nothing else
                # would stop its producer.
                await _stop_quietly(owned.producer)
            log.info("dropped partition %d", partition)

    async def retake(self, partition: int) -> None:
        """After a failed transaction: forget memory, restore from the log, and read the
        inputs again from the committed offsets: the changelog's, or the group's for a
        changelog written before offsets were kept there (input_offsets.start_offset).
        Retries while Kafka is unreachable."""
        await self.drop(partition)
        delay = 0.5
        while True:
            try:
                changelog = await self.take(partition)
                # After the take: its fence aborted whatever an earlier owner left open.
                tps = [TopicPartition(topic, partition) for topic in self.topics.decider_inputs()]
                group = await group_offsets(self.consumer, tps)
                for tp in tps:
                    start = start_offset(changelog.get(tp), group.get(tp))
                    if start is None:
                        await self.consumer.seek_to_beginning(tp)
                    else:
                        self.consumer.seek(tp, start)
                    self.owned[partition].next_offsets[tp] = await self.consumer.position(tp)
                    if start is not None and start == changelog.get(tp):
                        # Committed already; the group may lag it after a crash.
                        self.lag_marker.note({tp: start})
                self.takes += 1
                self.owned[partition].taken = self.takes  # after the seeks (Decider._fetch)
                # What the restored state still waits on is called again (lookup first when
                # begun): the calls may have died with a previous owner or an aborted answer.
                self.host.take_over(partition, self.owned[partition].states)
                return
            except KafkaError as error:
                log.warning("retaking partition %d failed (%s); retrying", partition, error)
                await self.drop(partition)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    # --- processing ----------------------------------------------------------------

    async def process(
        self, partition: int, batches: list[tuple[TopicPartition, list[ConsumerRecord]]]
    ) -> None:
        """Decides the inputs onto the partition's staged transaction; `_start_ready` starts
        it (or, while one is on the wire, once that has ended)."""
        if partition not in self.isolating:
            await self._decide(partition, batches)
            staged = self.owned[partition].staged
            if staged is not None and not staged.urgent and self.group_commit_s:
                await pause_point(DECIDER_WITH_STAGED_INPUTS, when=bool(staged.heads))
            return
        await self._commit(partition)  # nothing staged after a retake; never mix it in
        for tp, records in batches:
            for record in records:
                try:
                    await self._decide(partition, [(tp, [record])])
                    await self._commit(partition)
                except RECORD_REFUSED as error:
                    origin = (tp.topic, tp.partition, record.offset)
                    raise PoisonInput(origin, f"record_refused_by_kafka: {error!r}") from error
        self.isolating.discard(partition)

    async def _decide(
        self, partition: int, batches: list[tuple[TopicPartition, list[ConsumerRecord]]]
    ) -> None:
        """Decides the inputs not decided yet onto the partition's staged transaction."""
        owned = self.owned[partition]
        batches = [
            (tp, fresh)
            for tp, records in batches
            if (fresh := [r for r in records if r.offset >= owned.next_offsets.get(tp, 0)])
        ]
        live = []
        for tp, records in batches:
            if all(inline_answer(r.headers) for r in records):
                # Answers decided when they were written (dispatch_host): only their offset
                # moves, with the partition's next transaction, which they never open.
                owned.next_offsets[tp] = owned.read_past[tp] = records[-1].offset + 1
            else:
                live.append((tp, records))
        batches = live
        if not batches:
            return
        staged = owned.staged = owned.staged or Staged(partition)
        now_ms = time.time() * 1000
        for tp, records in batches:
            for record in records:
                if inline_answer(record.headers):
                    continue  # decided, and counted, with the transaction that wrote it
                staged.inputs += 1
                if record.timestamp_type == 0:  # CreateTime: the producer's clock, this host's
                    DECIDER_INPUT_WAIT_SECONDS.observe(max(0.0, now_ms - record.timestamp) / 1000)
                # One span per decided input, under the context its producer sent.
                with tracing.consuming("decider.decide", record, self.group_id):
                    await self._decide_one(owned, staged, tp, record)
            staged.offsets[tp] = records[-1].offset + 1
            # Decided, in memory: a batch fetched again before a seek skips them. A failed
            # commit drops this memory and reads from the committed offsets again.
            owned.next_offsets[tp] = records[-1].offset + 1

    async def _commit(self, partition: int) -> None:
        """Commits the partition's staged decisions now, and waits for it."""
        owned = self.owned[partition]
        staged = _detach(owned)
        if staged is not None:
            await self._send(partition, owned, staged)

    async def _send(
        self, partition: int, owned: OwnedPartition, staged: "Staged", *, call: bool = True
    ) -> None:
        """Commits detached staged decisions with their offsets in one transaction, with a
        signed checkpoint if a transaction ended or a head waited its interval. On any
        failure the staged decisions are gone: the caller restores or drops. The offsets
        are records on the changelog partition the transaction writes anyway: no request
        and no partition more (services.decider.input_offsets). `call`: whether this process
        starts the committed dispatches' calls (not at a hand-over: the next owner's
        take-over does)."""
        began = time.monotonic()
        signing = staged.ended or owned.unsigned.overdue()
        if signing:
            self._sign(owned, staged, owned.unsigned.pending(staged.heads))
        staged.plan_offsets(self.topics.decider_state)
        self.host.prepare(staged.dispatches)
        try:
            async with owned.producer.transaction():
                sent = await staged.write(owned.producer)
                await sent.acknowledged()
                await pause_point(DECIDER_IN_OPEN_TRANSACTION, flush=owned.producer.flush)
                if armed(DECIDER_WITH_PIPELINED_INPUTS):
                    await _held_open_until_pipelined(owned)
        except IllegalOperation as error:
            owned.staged = None
            # A fence the sender met between two of our calls (kafka_clients.transaction_
            # failure): raise it as itself, so it is handled as a fence, not as a crash.
            failure = transaction_failure(owned.producer)
            if failure is None:
                raise
            raise failure from error
        except BaseException:
            # What was decided on this transaction's states never commits without it (the
            # caller restores the partition or lets it go; this is not left to it).
            owned.staged = None
            raise
        owned.ended_at = time.monotonic()
        owned.took_s = owned.ended_at - began
        DECIDER_TRANSACTION_SECONDS.observe(owned.took_s)
        labelled(DECIDER_TRANSACTIONS, "decisions").inc()
        DECIDER_INPUTS_COMMITTED.inc(staged.inputs)
        if signing:
            owned.unsigned.signed()
        else:
            owned.unsigned.keep(staged.heads)
        for key, kept in staged.changes.items():
            if isinstance(kept, FinishedTransaction):
                kafka_key, index = staged.changelog[key]
                owned.states.pop(key, None)
                owned.finished.put(kafka_key, kept, sent.offset(index))
            else:
                owned.states[key] = kept
        owned.committing = None
        # Committed: the calls start now, in tasks of their own (never awaited here).
        if call:
            self.host.submit(staged.dispatches)
        self.lag_marker.note(staged.offsets)
        # Held where the changelog is ahead of the group's lag marker, at a transaction's
        # end (a late input of a finished transaction, decided twice, would show twice).
        await pause_point(DECIDER_AFTER_COMMIT, when=staged.ended)

    async def hand_over(self, partitions: set[int]) -> None:
        """Before a revocation or a clean stop lets these partitions go (their transactions
        on the wire ended): what each has staged is committed rather than forgotten. The
        inputs read from Kafka would be read again by the next owner, but an answer of this
        process's own call, decided inline, exists nowhere else: forgotten, the next owner's
        take-over would ask the provider again (a lookup; for a provider that cannot be
        asked, a person). Not when the partition's last transaction failed: its staged
        decisions were decided on states that never committed, and the next owner decides
        their inputs again. The committed dispatches are the next owner's to call
        (take-over). The partitions commit at once, each given up past HAND_OVER_S or on a
        failure: the next owner's fence aborts what it left open, as after a crash."""
        await asyncio.gather(
            *(
                self._hand_over(partition, owned)
                for partition, owned in self.owned.items()
                if partition in partitions and owned.staged is not None and not _failed(owned.task)
            )
        )

    async def _hand_over(self, partition: int, owned: OwnedPartition) -> None:
        staged = _detach(owned)
        assert staged is not None
        # In a task, given up as a transaction past its deadline is (`_given_up`): a single
        # cancel ends in the transaction's abort, which waits, shielded, for a broker that
        # may answer nothing (frozen: a stop held 40 s a request, without end for the
        # commit's retries).
        sending = asyncio.ensure_future(self._send(partition, owned, staged, call=False))
        try:
            await _given_up(sending, HAND_OVER_S)
        finally:
            sending.cancel()  # this hand-over cancelled itself: its transaction goes with it
        error = sending.exception() if not sending.cancelled() else TimeoutError(HAND_OVER_S)
        if error is None:
            return
        if not isinstance(error, (KafkaError, IllegalOperation, TimeoutError)):
            raise error
        # Transactional: nothing of an uncommitted transaction is visible, and the next
        # owner's fence aborts it if it is still open; the inputs' offsets are on the
        # changelog with the last committed transaction, so it decides them again.
        log.warning(
            "partition %d: staged decisions not committed before the hand-over (%r);"
            " the next owner decides their inputs again",
            partition,
            error,
        )

    async def _decide_one(
        self, owned: OwnedPartition, staged: Staged, tp: TopicPartition, record: ConsumerRecord
    ) -> None:
        poisoned = self.poison.get((tp.topic, tp.partition, record.offset))
        if poisoned is not None:
            await self._dead_letter(staged, tp, record, poisoned)
            return
        if holds_nul(record.value):
            # Nothing recon produces holds one (the intake refuses it, evidence escapes it):
            # a record from a side door, whose events the projector could never store.
            await self._dead_letter(staged, tp, record, "unstorable input: a NUL in its text")
            return
        try:
            message = parse_input(record.value)
        except ValidationError as error:
            await self._dead_letter(staged, tp, record, f"unreadable input: {error}")
            return

        async def refuse(reason: str) -> None:
            await self._dead_letter(staged, tp, record, reason)

        await self._decide_input(
            owned, staged, message, refuse, f"{tp.topic}:{tp.partition}@{record.offset}"
        )

    async def _decide_input(
        self,
        owned: OwnedPartition,
        staged: Staged,
        message: DeciderInput,
        refuse: Callable[[str], Awaitable[None]],
        where: str,
    ) -> None:
        """Decides one input onto the staged transaction; `refuse` dead-letters it."""
        key = (message.tenant, message.tx_id)
        kafka_key = partition_key(*key)
        tracing.annotate(tx_id=message.tx_id, input=message.type)
        stored = owned.stored(key)
        if stored is None:
            stored = await owned.finished.get(kafka_key)
        if isinstance(stored, FinishedTransaction):
            state = revive(stored)
        else:
            state = stored or initial_state(*key)
        if isinstance(message, OperationObserved) and state.status is None:
            await refuse("observation for an unknown transaction")
            return
        finished = is_terminal(state)
        try:
            state, envelopes, decided = handled(state, message)
            kept = keep(state)
            events = [envelope.model_dump_json().encode() for envelope in envelopes]
            changelog = kept.model_dump_json().encode()
        except Exception as error:
            # The decision is pure: this input would fail the same way on every retry
            # and hold up every transaction behind it on the partition.
            log.exception("deciding %s failed", where)
            await refuse(f"decision_failed: {error!r}")
            return
        if not envelopes:
            return  # nothing to write: its offset goes with the next transaction
        largest = max(len(value) for value in [*events, changelog]) + len(kafka_key)
        if largest > MAX_RECORD_BYTES:
            await refuse(
                f"record_too_large: deciding this input would write a {largest}-byte record, "
                f"over the decider's bound of {MAX_RECORD_BYTES} bytes; nothing was decided",
            )
            return
        staged.changes[key] = kept
        staged.urgent = staged.urgent or not nobody_waits(decided, state)
        staged.live = staged.live or not finished
        last = envelopes[-1]
        staged.heads[key] = Head(last.tenant, last.tx_id, last.seq, last.hash)
        staged.ended = staged.ended or is_terminal(state)
        trace = tracing.kafka_headers() or []
        for envelope, value in zip(envelopes, events, strict=True):
            # The type header lets readers pass over events they do not act on unparsed.
            headers = [*trace, event_type_header(envelope.type)]
            staged.plan(
                self.topics.events, value, kafka_key, partition=staged.partition, headers=headers
            )
        staged.dispatches += dispatch_orders(envelopes, decided, staged.partition, trace or None)
        log_dispatches(envelopes)
        # A finished transaction's full state is replaced by its marker under the same
        # key: compaction drops the full state, and a late duplicate still finds the
        # transaction finished instead of starting it again.
        staged.plan_state(self.topics.decider_state, key, kafka_key, changelog)

    # --- answers of the calls this process makes (services.decider.dispatch_host) --------

    def _answered(self, answer: Answer) -> None:
        self.answers.append(answer)
        self.woken.set()  # the loop takes it without waiting for a fetch

    def _current(self, partition: int, tenant: str, tx_id: str) -> Stored | None:
        """The transaction's latest decided state, its marker once finished (which waits on
        nothing: transactions.unanswered.waits_on)."""
        owned = self.owned.get(partition)
        return owned.stored((tenant, tx_id)) if owned is not None else None

    async def _take_answers(self) -> None:
        """Decides the answers that came since the last turn onto their partitions' staged
        transactions; those of a partition no longer owned go to recon.observations."""
        answers, self.answers = self.answers, []
        by_partition: dict[int, list[Answer]] = defaultdict(list)
        for answer in answers:
            by_partition[answer.partition].append(answer)
        for partition, theirs in by_partition.items():
            if partition not in self.owned:
                self.host.forward_later(theirs)
                continue
            await self._guarded(partition, functools.partial(self._decide_answers, answers=theirs))

    async def _decide_answers(self, partition: int, answers: list[Answer]) -> None:
        """Each answer is decided and written to recon.observations in the same transaction,
        as evidence: with the INLINE header when decided here (read back, it is skipped),
        without it when the decider refused it (read back, it is dead-lettered as any
        observation would be)."""
        owned = self.owned[partition]
        staged = owned.staged = owned.staged or Staged(partition)
        for answer in answers:
            obs = answer.observation
            refused: list[str] = []

            async def refuse(reason: str, refused: list[str] = refused) -> None:
                refused.append(reason)

            # Under the call's trace when it has one; else only the log context the span
            # would scope (as tracing.consuming does for a record without one).
            parent = tracing.context_from(answer.trace)
            scope = log_context() if parent is None else tracing.span("decider.decide", parent)
            with scope:
                await self._decide_input(owned, staged, obs, refuse, f"answer {obs.message_id}")
            staged.urgent = staged.urgent or answer.unaskable
            headers = [*(answer.trace or []), *([] if refused else [INLINE_HEADER])]
            staged.plan(
                self.topics.observations,
                obs.model_dump_json().encode(),
                partition_key(obs.tenant, obs.tx_id),
                partition=partition,
                headers=headers,
            )
            staged.inputs += 1

    def _sign(self, owned: OwnedPartition, staged: Staged, heads: list[Head]) -> None:
        for value in checkpoint_records(self.signing_key, heads, owned.checkpoints):
            staged.plan(self.topics.checkpoints, value, None, partition=staged.partition)

    async def _sign_quiet(self, partition: int) -> None:
        """Signs the heads of a partition that has been quiet for the interval: no input
        came to carry them. A failure restores the partition (the heads stay until then)."""
        owned = self.owned[partition]
        staged = Staged(partition)
        self._sign(owned, staged, owned.unsigned.pending({}))
        async with owned.producer.transaction():
            await (await staged.write(owned.producer)).acknowledged()
        labelled(DECIDER_TRANSACTIONS, "checkpoints").inc()
        owned.unsigned.signed()

    async def _dead_letter(
        self, staged: Staged, tp: TopicPartition, record: ConsumerRecord, reason: str
    ) -> None:
        log.error("dead-lettering %s:%d@%d: %s", tp.topic, tp.partition, record.offset, reason)
        dead_lettered(reason)  # counted when staged: an aborted batch stages it again
        value: bytes = record.value or b""
        key: bytes | None = record.key
        headers = dead_letter_headers(reason, tp.topic, tp.partition, record.offset, self.group_id)
        if len(value) + len(key or b"") > MAX_RECORD_BYTES:
            # Too large to copy (copying it could be refused in turn): the dead letter
            # points at the input, which its topic keeps forever.
            value = json.dumps(
                {"omitted_bytes": len(value), "sha256": hashlib.sha256(value).hexdigest()}
            ).encode()
            key = key if key is not None and len(key) <= 1024 else None
            headers.append(("value-omitted", b"true"))
        staged.plan(self.topics.dead_letters, value, key, headers=headers)
        staged.urgent = True  # rare, and someone is paged for it: never held back

    async def run(self, stop: asyncio.Event) -> None:
        async with AsyncExitStack() as stack:
            # Pushed first, so run last, whichever way the run ends.
            stack.push_async_callback(self.stop_clients)
            # Closed last: its calls are cancelled once the partitions are let go.
            if await self.host.start(stack, stop):
                await self._run(stop)

    async def stop_clients(self) -> None:
        """Stops every Kafka client this decider made, started or not, each whatever the
        others' stops raised. The run stopped them only on its way out of a started loop: a
        decider whose calls are off never started (nor stopped) its dispatch producer, and a
        start that failed or was stopped before the loop (the broker away) left its inputs'
        consumer and changelog reader as made; each is logged at ERROR as unclosed when
        collected (at the suite's end: docs/testing.md, "Kafka clients left unstopped"). A
        client's second stop does nothing, so those the loop stopped are no matter.

        And the partitions still owned once the consumer has stopped are dropped, their
        producers with them: the loop's last steps drop what it owns, but a start given up on
        the stop returns before them, and a run ended by an error (not a stop) has its
        consumer's stop finish a rebalance it is in, whose assignment the listener takes
        (it takes none once the stop is asked; tests/fault/
        test_decider_stopped_mid_rebalance.py)."""
        await stop_each(
            functools.partial(stop_consumer, self.consumer),
            self._drop_all,
            self.changelog_reader.stop,
            functools.partial(stop_producer, self.host.producer),
        )

    async def _drop_all(self) -> None:
        # The partitions owned now, not when stop_clients was called: the consumer's stop
        # before this may have given some.
        await asyncio.gather(*(self.drop(partition) for partition in list(self.owned)))

    async def _run(self, stop: asyncio.Event) -> None:
        self.consumer.subscribe(
            consumer_groups.inputs(consumer_groups.DECIDER, self.settings),
            listener=_Listener(self, stop),
        )
        # Given up on the stop: stop_clients (run's stack) stops the consumer.
        if not await start_kafka_client(self.consumer, "decider inputs", stop):
            return
        try:
            while not stop.is_set():
                batch = await self._fetch()
                await observe_lag(self.consumer, self.group_id, batch)
                if self.failure is not None:
                    raise DeciderHalted("a partition could not be taken") from self.failure
                if batch:
                    self.fetched = sum(len(records) for records in batch.values())
                async with self.lock:
                    await self._process_batch(batch)
                    await self._take_answers()
                    # After deciding: a retake's seek never meets records fetched before it.
                    await self._settle()
                    self._start_ready()
                self.lag_marker.maybe_send()
        finally:
            # Each step of a clean stop is bounded, a broker that answers nothing included
            # (docs/operations.md, "Stopping"): what one cannot finish in time is left as a
            # crash leaves it, and the next owner's take-over reads it again.
            async with self.lock:
                # In-flight transactions end first: the hand-over carries their offsets.
                # Not their deadline's 30 s: a stop gives each the hand-over's time.
                await self._finish(set(self.owned), HAND_OVER_S)
                # Then what is staged, answers decided inline included (hand_over).
                await self.hand_over(set(self.owned))
                # Then the calls in flight, whose answers go to the partitions' next owners.
                answers, self.answers = self.answers, []
                await self.host.leave(answers)
                # A clean stop leaves the group's lag marker where the changelog is. The
                # partitions' producers stop meanwhile: each waits on its own broker.
                await asyncio.gather(self.lag_marker.hand_over(), self._drop_all())
            for waiting in (self.fetching, self.waking):
                if waiting is not None:
                    waiting.cancel()
            await stop_consumer(self.consumer)
            await self.changelog_reader.stop()

    async def _fetch(self) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The next input; or nothing once a partition's transaction has ended (its next
        may start) or a staged one is due. A fetch not done yet is kept for the next call,
        never cancelled (aiokafka would lose count of the poll in progress)."""
        fetching = self.fetching
        if fetching is None:
            self.fetch_began = self.takes
            fetching = self.fetching = asyncio.ensure_future(
                self.consumer.getmany(timeout_ms=500, max_records=500)
            )
        waking = self.waking
        if waking is None:
            waking = self.waking = asyncio.ensure_future(self.woken.wait())
        await asyncio.wait(
            {fetching, waking}, timeout=self._poll_ms() / 1000, return_when=asyncio.FIRST_COMPLETED
        )
        if waking.done():
            self.waking = None  # `_settle` clears the event
        if not fetching.done():
            return {}
        self.fetching = None
        batch = fetching.result()
        for tp in list(batch):
            owned = self.owned.get(tp.partition)
            if owned is not None and owned.taken > self.fetch_began and tp in owned.next_offsets:
                # Taken (a retake's seek) while this fetch waited: its records may come from
                # before the seek. Given back: read again from the first input not decided.
                del batch[tp]
                self.consumer.seek(tp, owned.next_offsets[tp])
        return batch

    def _wait_s(self, staged: Staged) -> float:
        coming = self.host.calling[staged.partition] > 0
        return interval(
            self.group_commit_s,
            self.fetched,
            len(self.owned),
            answer_coming=coming,
            only_finished=not staged.live,
        )

    def _poll_ms(self) -> int:
        """How long the loop waits for input, cut short to start the staged transactions on
        time (a transaction that ends wakes the loop by itself)."""
        if self.answers:
            return 0  # came while the loop decided: taken at once
        busy = self._busy_partitions()
        starts = [
            self._start_at(o, busy) for o in self.owned.values() if o.staged and o.task is None
        ]
        if not starts:
            return 500  # at most this late for a quiet partition's overdue checkpoints
        due = min(starts) - time.monotonic()
        return max(0, min(500, int(due * 1000) + 1))

    def _busy_partitions(self) -> set[int]:
        """The partitions with a decision that matters staged or on the wire, or a provider
        call in flight (its answer will be one): at concurrency 30 there always are others."""
        return {
            partition
            for partition, owned in self.owned.items()
            if self.host.calling[partition] > 0
            or any(s is not None and s.urgent for s in (owned.staged, owned.committing))
        }

    def _start_at(self, owned: OwnedPartition, busy: set[int]) -> float:
        """When the partition's staged transaction may start: with an urgent decision at
        once, with what nobody waits for once it has waited its interval; either not back to back
        with the partition's last transaction (group_commit.next_start), the spacing that
        of a partition alone if no other partition is `busy` or if the partition holds no
        live transaction but those its staged decisions carry (`_nothing_else_live`)."""
        staged = owned.staged
        assert staged is not None
        if not self.group_commit_s:
            return staged.since  # group commit off: each as soon as the one before has ended
        due = staged.since if staged.urgent else staged.since + self._wait_s(staged)
        alone = not busy - {staged.partition} or _nothing_else_live(owned, staged)
        bound = spacing_bound(
            self.group_commit_s, self.fetched, len(self.owned), owned.took_s, alone=alone
        )
        return next_start(due, owned.ended_at, owned.took_s, bound)

    async def _settle(self) -> None:
        """Handles the partitions' transactions that have ended: a failure restores or
        drops its partition, as if the loop had waited for it."""
        self.woken.clear()  # a transaction ending from here on wakes the next fetch
        for partition, owned in list(self.owned.items()):
            task = owned.task
            if task is None:
                continue
            if not task.done():
                if _time_left(owned) <= 0:
                    log.error(
                        "transaction on partition %d has not ended in %.0f s; giving it up "
                        "and restoring the partition",
                        partition,
                        TRANSACTION_DEADLINE_S,
                    )
                    # The retake's new producer fences the stuck one: its transaction ends
                    # (aborted, or committed if its commit had reached the coordinator)
                    # before the partition's states and offsets are read back.
                    await self.retake(partition)
                continue
            owned.task = None
            error = task.exception()
            if error is not None:
                await self._recover(partition, error)

    def _start_ready(self) -> None:
        """Starts each partition's staged transaction that is ready (`_start_at`), unless
        one is on the wire, and the checkpoints of a partition that has been quiet for their
        interval."""
        now = time.monotonic()
        busy = self._busy_partitions()
        for partition, owned in self.owned.items():
            if owned.task is not None or partition in self.isolating:
                continue
            if owned.staged is not None:
                if now >= self._start_at(owned, busy):
                    staged = _detach(owned)
                    assert staged is not None
                    self._start(owned, self._send(partition, owned, staged))
            elif owned.unsigned.overdue():
                self._start(owned, self._sign_quiet(partition))

    def _start(self, owned: OwnedPartition, work: Coroutine[Any, Any, None]) -> None:
        owned.task_began = time.monotonic()
        owned.task = asyncio.create_task(work)
        owned.task.add_done_callback(lambda _: self.woken.set())

    async def _finish(self, partitions: set[int], within: float = TRANSACTION_DEADLINE_S) -> None:
        """Waits for these partitions' transactions on the wire to end (before a hand-over:
        a committed one's offsets go with it), each at most `within` s more; their failures
        need no handling, the partitions are let go."""
        on_the_wire = [
            owned
            for partition, owned in self.owned.items()
            if partition in partitions and owned.task is not None
        ]
        await asyncio.gather(*(_ended(owned, within) for owned in on_the_wire))

    async def _process_batch(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        by_partition: dict[int, list[tuple[TopicPartition, list[ConsumerRecord]]]] = defaultdict(
            list
        )
        # Commands before observations: an observation is always caused by an event
        # that was decided from an earlier command, never the other way round.
        for tp in sorted(batch, key=lambda t: t.topic != self.topics.commands):
            if batch[tp]:
                by_partition[tp.partition].append((tp, batch[tp]))
        for partition in by_partition:
            if partition in self.owned:  # else revoked while fetching: its new owner reads it
                # One after another: deciding is CPU (the transactions run in their own tasks),
                # and a task per partition and fetch cost more than it saved.
                await self._guarded(partition, lambda p: self.process(p, by_partition[p]))

    async def _guarded(self, partition: int, work: Callable[[int], Awaitable[None]]) -> None:
        try:
            await work(partition)
        except Exception as error:
            await self._recover(partition, error)

    async def _recover(self, partition: int, error: BaseException) -> None:
        """After `partition`'s work failed: a fence drops it, a refused record isolates
        the input, anything Kafka may cure restores it; anything else is raised."""
        if isinstance(error, ProducerFenced):
            log.warning(_FENCED_ALONE, partition)
            await self.drop(partition)
            self._ask_the_group()
        elif isinstance(error, PoisonInput):
            if error.origin in self.poison:
                # Even its small dead letter was refused: nothing left to try here.
                raise DeciderHalted(f"cannot dead-letter {error}") from error
            log.error("input %s cannot be written; dead-lettering it", error)
            self.poison[error.origin] = error.reason
            self.isolating.discard(partition)
            await self.retake(partition)
        elif isinstance(error, RECORD_REFUSED):
            log.error(
                "Kafka refused a record on partition %d (%r); replaying the batch one "
                "input per transaction to find the input that causes it",
                partition,
                error,
            )
            self.isolating.add(partition)
            await self.retake(partition)
        elif isinstance(error, (KafkaError, TimeoutError)):
            log.warning("transaction on partition %d failed (%r); restoring", partition, error)
            await self.retake(partition)
        else:
            raise error

    def _ask_the_group(self) -> None:
        """Asks for a rebalance after a fence. A fence says that a producer initialised the
        partition's transactional id after ours, not that the group gave the partition to
        another decider: a transaction coordinator that aborts a transaction it timed out
        bumps the epoch too (a broker killed under load may leave one open that long), as
        does any stray producer of the id. Dropped and never taken again, the partition sat
        unserved while the group still assigned it here, its transactions stuck until the
        next rebalance. The group is the one judge: the rebalance gives it back to this
        decider (`on_partitions_assigned` takes what is not owned) or to the decider that
        owns it."""
        coordinator = self.consumer._coordinator
        if coordinator is not None:  # None before the consumer starts: no group to ask
            coordinator.request_rejoin()


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, decider: Decider, stop: asyncio.Event) -> None:
        self.decider = decider
        self.stop = stop

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self.decider.lock:
            # The transactions on the wire end first; then the next owner reads the
            # changelog, and lag tools and an earlier release (in a rolling upgrade) read the
            # group: it is left where the changelog is.
            await self.decider._finish({tp.partition for tp in revoked})
            await self.decider.hand_over({tp.partition for tp in revoked})
            await self.decider.lag_marker.hand_over({tp.partition for tp in revoked})
            for partition in {tp.partition for tp in revoked}:
                await self.decider.drop(partition)
                self.decider.isolating.discard(partition)
            # Before the revocation returns (the next owner is assigned after it): the calls
            # of these partitions that ended keep no lease from their take-over.
            await self.decider.host.let_go({tp.partition for tp in revoked})
            gone = {(tp.topic, tp.partition) for tp in revoked}
            for origin in [o for o in self.decider.poison if o[:2] in gone]:
                del self.decider.poison[origin]

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        async with self.decider.lock:
            if self.stop.is_set():
                # Leaving the group (a rebalance its consumer's stop completes): a take now,
                # its fence, restore and calls' take-over, would be dropped at once and its
                # calls abandoned as a crash abandons them. The next owner takes them.
                log.info(
                    "stopping: partitions %s left to the next owner",
                    sorted({tp.partition for tp in assigned}),
                )
                return
            # Concurrently: each take waits on a producer's init and a restore read.
            new = sorted({tp.partition for tp in assigned} - set(self.decider.owned))
            results = await asyncio.gather(
                *(self.decider.retake(partition) for partition in new), return_exceptions=True
            )
            for partition, result in zip(new, results, strict=True):
                if isinstance(result, BaseException):
                    # retake retries what may pass; this will not. Keeping the partition
                    # assigned but unserved would stall it silently: stop the process,
                    # so the group loses this member and the failure is seen.
                    log.error("cannot take partition %d: %r", partition, result)
                    self.decider.failure = self.decider.failure or result


async def producer_fence(producer: AIOKafkaProducer) -> Fence:
    """The fence of a started transactional producer: its transactional id, the producer
    id and epoch its initialisation was given, and the cluster that gave them (services.
    dispatcher.call_fence; one metadata round trip)."""
    txn = producer._txn_manager
    return Fence(
        txn.transactional_id,
        txn.producer_id,
        txn.producer_epoch,
        await cluster_id(producer.client),
    )


def _failed(task: "asyncio.Task[None] | None") -> bool:
    """Whether the partition's last transaction (ended) failed."""
    return task is not None and (task.cancelled() or task.exception() is not None)


def _detach(owned: OwnedPartition) -> "Staged | None":
    """Takes the staged decisions off the partition to commit them, before the task that
    sends them runs: what the loop decides from then on is staged for the next transaction,
    never added to this one on its way."""
    staged, owned.staged = owned.staged, None
    if staged is not None:
        owned.committing = staged
        # Answers read back and skipped meanwhile: their offsets go with this transaction.
        for tp, offset in owned.read_past.items():
            staged.offsets[tp] = max(offset, staged.offsets.get(tp, 0))
        owned.read_past.clear()
    return staged


def _nothing_else_live(owned: OwnedPartition, staged: Staged) -> bool:
    """Whether every live transaction of the partition is one its staged decisions carry:
    then no call's answer, webhook or step of another transaction can come to ride with
    them, only a new submission, whatever the other partitions do. At concurrency 1 the
    previous transaction's receipt, in flight or committing on another partition as the
    next transaction's first steps are decided, made those wait the full spacing (about a
    transaction's duration: 27 ms each on 5 % of the transactions at load 15, probed); at
    concurrency 30 every partition holds several live transactions, and the spacing that
    gathers their inputs is unchanged. A transaction that stays live (held, in review) only
    keeps its partition from counting as alone this way."""
    return all(key in staged.changes for key in owned.states)


def _outcome(partition: int, task: "asyncio.Task[None]") -> None:
    """A dropped partition's last transaction: its failure needs no handling (the
    partition is let go), only a line in the log. A fence reads as one whichever way it
    was met: a decider frozen past its session wakes to a revocation and its fenced commit
    at once, and either may reach the partition first."""
    if task.cancelled():
        log.info("transaction of dropped partition %d given up", partition)
        return
    error = task.exception()
    if isinstance(error, ProducerFenced):
        log.warning(_FENCED, partition)
    elif error is not None:
        log.info("transaction of dropped partition %d failed (%r)", partition, error)


def _time_left(owned: OwnedPartition) -> float:
    """How long the partition's task on the wire may still run (TRANSACTION_DEADLINE_S)."""
    return owned.task_began + TRANSACTION_DEADLINE_S - time.monotonic()


async def _ended(owned: OwnedPartition, within: float = TRANSACTION_DEADLINE_S) -> None:
    """Until the partition's task on the wire has ended: at most TRANSACTION_DEADLINE_S
    from its start (or `within` from now, if sooner), then cancelled (`_given_up`)."""
    task = owned.task
    assert task is not None
    await _given_up(task, min(_time_left(owned), within))


async def _given_up(task: "asyncio.Future[None]", left: float) -> None:
    """Until a transaction's `task` has ended: at most `left` s, then cancelled. Again and
    again: a cancelled transaction's abort waits, shielded, for the producer's sender, which
    a stuck transaction (or a broker that answers nothing) never frees; each further cancel
    ends that wait."""
    if left > 0:
        await asyncio.wait({task}, timeout=left)
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)


async def _held_open_until_pipelined(owned: OwnedPartition) -> None:
    """Test only (armed): holds this transaction open, its records sent, without holding
    the loop, until a later input of the partition is decided on its states; then pauses
    there, the window between deciding inputs and committing the transaction before them."""
    async with asyncio.timeout(60):
        while owned.staged is None or not owned.staged.heads:
            await asyncio.sleep(0.01)
    await pause_point(DECIDER_WITH_PIPELINED_INPUTS, flush=owned.producer.flush)


async def _stop_quietly(producer: AIOKafkaProducer) -> None:
    with contextlib.suppress(Exception):
        await stop_producer(producer)


async def run_decider(settings: Settings, stop: asyncio.Event) -> None:
    if not await ensure_recon_topics(settings, stop=stop):
        return
    tune_for_service()
    await Decider(settings).run(stop)
