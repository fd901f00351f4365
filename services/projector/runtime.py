"""The projector's runtime: recon.events and recon.drift -> Postgres.

The database, not Kafka, owns the position: on every assignment, and after every failed
batch, the consumer is sought to the offsets stored with the rows (projections.writer).
Kafka offsets are committed too, but only so that consumer lag is visible to operators.
"""

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import asyncpg
from aiokafka import ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from events.dead_letters import dead_letter_headers
from events.drift import DriftDetected
from events.envelope import Envelope
from events.transaction_events import Event
from projections.decode import decode_drift, decode_event
from projections.offsets import load_offsets
from projections.view_cache import ViewCache
from projections.writer import DriftRecord, Record, project_batch, project_drift
from services import consumer_groups, task_dump
from services.closing import stopped_with
from services.config import Settings
from services.kafka_clients import acked_producer, group_consumer
from services.kafka_setup import ensure_recon_topics
from services.kafka_start import start_kafka_client
from services.metrics import (
    PROJECTOR_BATCHES,
    PROJECTOR_STATEMENTS,
    count_moves,
    dead_lettered,
    observe_lag,
)
from services.pending_offsets import PendingOffsets
from services.pg_pool import UNREACHABLE
from services.postgres_start import open_pool
from services.projector.stall_watch import STALLED_EXIT_CODE, StallWatch
from services.reader_batching import wait_before_next_fetch
from services.stop_race import StoppedStarting

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0
# The Kafka commit is a lag marker for operators, not the position (the database owns it):
# under load it is sent at most this often (each commit is a request and a write to
# __consumer_offsets per batch otherwise), and as soon as the projector is idle.
LAG_MARKER_INTERVAL_S = 1.0
# A lag marker's commit that does not return is given up as one that failed. aiokafka
# retries a commit for as long as the group's coordinator cannot be reached, and the loop
# awaits the commit between fetches: a broker that answers nothing (frozen, behind a
# firewall that drops packets) held the loop, and with it the projector's stop, without end.
# Far above a loaded broker's commit (milliseconds).
LAG_MARKER_TIMEOUT_S = 5.0
# One read of the stored offsets, connection included. Unbounded, an acquire or a query on
# a server that stopped answering (frozen, a half-open socket) never returned, and inside
# the rebalance listener that stops the consumer for good (asyncpg's release also waits for
# a cancelled query's cancellation without end unless the acquire named a timeout).
SEEK_ATTEMPT_S = 5.0
# How often the stall watch looks.
STALL_CHECK_S = 1.0


class _SeekToStoredOffsets(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(
        self,
        seek: Callable[[set[TopicPartition]], Awaitable[None]],
        watch: StallWatch,
        views: ViewCache,
    ) -> None:
        self._seek = seek
        self._watch = watch
        self._views = views

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        # Another projector may write these next: what is kept of them is not to be
        # trusted on the way back (the writer's offset check would catch it too).
        self._views.forget({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        # aiokafka awaits this before fetching from the new partitions, so no record is
        # read from Kafka's committed position, which may lag the database's. Meanwhile the
        # consumer does not heartbeat: the stall watch counts this as not projecting.
        self._watch.seeking += 1
        try:
            await self._seek(assigned)
        finally:
            self._watch.seeking -= 1


class Projector:
    def __init__(self, settings: Settings, stop: asyncio.Event) -> None:
        self.settings = settings
        self.topic = settings.topics.events
        self.drift_topic = settings.topics.drift
        self.stop = stop
        self.pool: asyncpg.Pool | None = None
        self.consumer = group_consumer(settings, consumer_groups.PROJECTOR, "projector-inputs")
        self.group = f"{settings.group_prefix}{consumer_groups.PROJECTOR}"
        self.dead_letters = acked_producer(settings, "projector-dead-letters")
        # Next offsets projected but not yet committed as the lag marker.
        self.marker = PendingOffsets(self.consumer)
        self.watch = StallWatch(settings.projector_stall_s, time.monotonic())
        # The live views of the recon.events partitions this projector writes.
        self.views = ViewCache()

    async def run(self) -> None:
        # Everything is stopped however the run ends, from Postgres never reached to a
        # start that failed (services.closing); both clients were made with the projector.
        # In reverse: the consumer (a rebalance it completes on its way out still seeks
        # from Postgres), the dead letters' producer, then the pool.
        async with AsyncExitStack() as stack:
            stack.push_async_callback(self._close_pool)
            stopped_with(stack, self.dead_letters)
            stopped_with(stack, self.consumer)
            try:
                self.pool = await open_pool(
                    self.settings.database_url,
                    stop=self.stop,
                    min_size=1,
                    max_size=4,
                    init=_count_statements,
                )
            except StoppedStarting as stopped:
                log.info("projector stopped %s: nothing projected", stopped)
                return
            if not await ensure_recon_topics(self.settings, stop=self.stop):
                return
            # Either start given up on the stop leaves its client to the stack (as the saga's).
            if not await start_kafka_client(self.dead_letters, "projector dead letters", self.stop):
                return
            self.consumer.subscribe(
                consumer_groups.inputs(consumer_groups.PROJECTOR, self.settings),
                listener=_SeekToStoredOffsets(self.seek, self.watch, self.views),
            )
            if not await start_kafka_client(self.consumer, "projector consumer", self.stop):
                return
            self.watch.healthy_at = time.monotonic()
            stack.callback(asyncio.create_task(self._exit_when_stalled()).cancel)
            await self._loop()

    async def _close_pool(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    async def _loop(self) -> None:
        backoff = 0.0
        fetched = 0
        while not self.stop.is_set():
            wait = wait_before_next_fetch(fetched, self.settings.reader_batch_wait_s)
            if wait:
                await asyncio.sleep(wait)  # a backlog: let the next batch gather more
            batches = await self.consumer.getmany(timeout_ms=500, max_records=1000)
            self.watch.polled(bool(self.consumer.assignment()), time.monotonic())
            await observe_lag(self.consumer, self.group, batches)
            raw = [record for records in batches.values() for record in records]
            fetched = len(raw)
            if not raw:
                if self.marker:
                    await self._commit_lag_marker()
                continue
            try:
                await self._project(raw)
            except Exception:
                # Nothing of the batch is stored (one database transaction), so reading
                # again from the stored offsets neither skips nor repeats anything.
                backoff = min(max(backoff * 2, 0.2), MAX_BACKOFF_S)
                log.exception(
                    "projecting %d records failed; retrying from the stored offsets in %.1fs",
                    len(raw),
                    backoff,
                )
                await self.pool_expire()
                await asyncio.sleep(backoff)
                await self.seek(self.consumer.assignment())
                continue
            backoff = 0.0
            self.marker.note(
                {tp: records[-1].offset + 1 for tp, records in batches.items() if records}
            )
            if self.marker.due(LAG_MARKER_INTERVAL_S):
                await self._commit_lag_marker()

    async def _project(self, raw: list[ConsumerRecord[bytes, bytes]]) -> None:
        assert self.pool is not None
        records: list[Record] = []
        events: list[Event] = []
        poison: list[tuple[int, int]] = []
        drift: list[DriftRecord] = []
        drift_poison: list[tuple[int, int]] = []
        for record in raw:
            if record.topic == self.drift_topic:
                report = await self._parse_drift(record)
                if report is None:
                    drift_poison.append((record.partition, record.offset))
                else:
                    drift.append((record.partition, record.offset, report))
                continue
            decoded = await self._parse(record)
            if decoded is None:
                poison.append((record.partition, record.offset))
            else:
                records.append((record.partition, record.offset, decoded[0]))
                events.append(decoded[1])
        # One database transaction per topic, each with its own offsets: the two topics
        # are independent, so each is exactly-once on its own.
        async with self.pool.acquire() as conn:
            moves = await project_batch(
                conn, self.topic, records, skipped=poison, events=events, cache=self.views
            )
            count_moves(moves)  # committed: counted once, whatever happens next
            await project_drift(conn, self.drift_topic, drift, skipped=drift_poison)
        PROJECTOR_BATCHES.inc()
        if log.isEnabledFor(logging.DEBUG):  # its argument is a walk over the whole batch
            log.debug(
                "projected %d events (%d dead-lettered) up to %s",
                len(records),
                len(poison),
                {r.partition: r.offset for r in raw},
            )

    async def _parse(self, record: ConsumerRecord[bytes, bytes]) -> tuple[Envelope, Event] | None:
        decoded = decode_event(record.value)
        if isinstance(decoded, str):
            await self._dead_letter(record, decoded)
            return None
        return decoded

    async def _parse_drift(self, record: ConsumerRecord[bytes, bytes]) -> DriftDetected | None:
        decoded = decode_drift(record.value)
        if isinstance(decoded, str):
            await self._dead_letter(record, decoded)
            return None
        return decoded

    async def _dead_letter(self, record: ConsumerRecord[bytes, bytes], reason: str) -> None:
        log.error(
            "dead-lettering %s[%d]@%d: %s", record.topic, record.partition, record.offset, reason
        )
        dead_lettered(reason)
        await self.dead_letters.send_and_wait(
            self.settings.topics.dead_letters,
            value=record.value,
            key=record.key,
            headers=dead_letter_headers(
                reason,
                record.topic,
                record.partition,
                record.offset,
                self.group,
            ),
        )

    async def seek(self, partitions: set[TopicPartition]) -> None:
        """Seek to the stored offsets, waiting for the database as long as it takes."""
        backoff = 0.2
        while not self.stop.is_set():
            assert self.pool is not None
            try:
                async with (
                    asyncio.timeout(SEEK_ATTEMPT_S),
                    self.pool.acquire(timeout=SEEK_ATTEMPT_S) as conn,
                ):
                    stored = {
                        topic: await load_offsets(conn, topic)
                        for topic in {tp.topic for tp in partitions}
                    }
                break
            except UNREACHABLE:  # a timed-out attempt too (TimeoutError is an OSError)
                log.exception("cannot read stored offsets; retrying in %.1fs", backoff)
                await self.pool_expire()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        else:
            return
        for tp in partitions:
            self.consumer.seek(tp, stored[tp.topic].get(tp.partition, 0))

    async def _exit_when_stalled(self) -> None:
        """End the process, hard, once it has not projected for the stall limit."""
        while True:
            await asyncio.sleep(STALL_CHECK_S)
            stalled = self.watch.stalled_for(time.monotonic())
            if stalled is None:
                continue
            log.error(
                "not projecting for %.0fs (no poll with partitions assigned outside a "
                "rebalance); exiting %d to be restarted; where every task waits:",
                stalled,
                STALLED_EXIT_CODE,
            )
            task_dump.dump()
            for handler in logging.getLogger().handlers:
                handler.flush()
            # Not a clean stop: consumer.stop() would await the coordinator that is stuck.
            os._exit(STALLED_EXIT_CODE)

    async def pool_expire(self) -> None:
        # Connections that saw the server go away are replaced on their next acquire.
        # A coroutine in asyncpg: called without await it was never run.
        if self.pool is not None:
            await self.pool.expire_connections()

    async def _commit_lag_marker(self) -> None:
        try:
            await self.marker.commit(timeout_s=LAG_MARKER_TIMEOUT_S)
        except (KafkaError, TimeoutError) as exc:
            timed_out = isinstance(exc, TimeoutError)
            failed = f"no answer in {LAG_MARKER_TIMEOUT_S:g} s" if timed_out else str(exc)
            log.warning("committing Kafka offsets (lag marker only) failed: %s", failed)
            # Not retried at every idle poll (a warning each 500 ms while the coordinator is
            # away): the next batch's commit carries newer offsets.
            self.marker.forget()


async def _count_statements(conn: asyncpg.Connection) -> None:
    # Statements per batch is what the projector's Postgres cost is judged by (make bench
    # prints it): counted where asyncpg sends them, so none is missed.
    conn.add_query_logger(lambda _query: PROJECTOR_STATEMENTS.inc())


async def run_projector(settings: Settings, stop: asyncio.Event) -> None:
    await Projector(settings, stop).run()
