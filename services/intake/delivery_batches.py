"""The webhook ingress's statement (services.intake.webhook_store.DELIVERIES: the dedupe
check with the match, and the records of the deliveries answered before it), shared by the
webhooks that reach it at the same time (issue 24); and for a delivery that reports drift,
the claim of its report (reconcilers.store.claiming_reports), which is not shared: it holds
its connection while the drift is produced, so at most DRIFT_CLAIMS are held at once.

While one statement runs, the webhooks that arrive wait and go together in the next: an
idle intake sends each at once, a busy one one statement for many deliveries. No wait is
added to make a batch, and the order of a webhook's steps stays (services.intake.webhooks):
its check answers before anything is produced, and it is answered 2xx once Kafka has
acknowledged its observation. A statement that fails fails each webhook it carried, as its
own statement would have; the records it carried go with the next.

The delivery ids answered are recorded by the next statement, or by one of their own within
RECORD_BOUND_S: a statement per webhook instead of two (a check, then a record with its own
commit), three per transaction at concurrency 1. The record only spares a retry being handled
again, which the message id makes harmless (services.intake.webhooks, step 4); in between,
the ids answered and not written are this intake's own duplicates, from memory.

Rows older than the dedupe horizon are deleted at most every PURGE_EVERY_S, after a
statement that recorded some, on the same connection.

The checks run on a connection of their own (`open_check_pool`) that plans them generically.
Postgres plans a prepared statement's first five runs with their values and keeps its
generic plan afterwards only if that costs no more than those five did on average: an
intake started on small tables made its five plans there, and once the tables grew (and
were analysed) the generic plan lost to that old average for good, so the check was planned
again at almost every call (0.6-1.4 ms of Postgres CPU per transaction at c30, docs/
benchmark.md). Its generic plan reaches every table by index whatever the values
(tests/integration/test_webhook_lookup_plans.py), so forcing it costs nothing in reads; the
plan is made once per connection and kept until an ANALYZE of one of its tables, so that
test also runs the plan made on a young database's tables on grown ones, under the pool's
settings (services.pg_pool.GENERIC_PLANS), which keep it from scanning or hashing a table.
"""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime, timedelta

import asyncpg

from reconcilers import store as drift_store
from services.crash_points import INTAKE_ANSWERED_UNRECORDED, crash_point
from services.intake import webhook_store
from services.intake.shared_statement import VALUE_ERRORS, Batched
from services.intake.slots import Slots
from services.intake.webhook_store import Asked, Delivery
from services.pg_pool import GENERIC_PLANS
from services.postgres_start import open_pool

log = logging.getLogger(__name__)

# Old delivery ids are deleted at most this often per intake process: cheap, and the
# table never holds much more than one horizon of deliveries.
PURGE_EVERY_S = 60.0

# Drift claims one intake holds at once. Each holds one of the main pool's connections (ten,
# services.intake.app, the one submissions take theirs from) until Kafka has acknowledged
# its report, up to services.intake.produce.DELIVERY_BOUND_S while Kafka is slow, or while
# the scan's claim of the same id waits so: unbounded, a burst of stray webhooks (an agent
# going around recon in bulk, a provider's retry storm) took every connection, and every
# submission waited on the pool (tests/integration/test_drift_claims_bound.py). Past the
# bound a delivery is answered 503 at once (services.intake.slots), not queued: it is not
# recorded, so the provider's retry is handled afresh, and the drift scan reports the stray
# past its grace whatever the webhook's fate; a queue would hold the provider's connections
# for as long as the held claims wait, to be answered 503 by Kafka's timeout all the same.
# When Kafka answers, a claim holds its connection for a few ms: three at once is hundreds
# of reports a second.
DRIFT_CLAIMS = 3

# A delivery handled is recorded by the next check's statement (one statement per webhook,
# issue 24), or by a statement of its own this long after it was answered when no check
# comes first. Until then the intake answers a retry `duplicate` from memory; a crash loses
# the record, and the provider's retry is handled again (services.intake.webhooks, step 4:
# the same message id, never a second effect). Short, so that another intake process's
# window for a retry it would not know is a duplicate stays small.
RECORD_BOUND_S = 0.2


# The records the checks write need no flush of the WAL before the statement returns: a
# record lost with a Postgres crash is a record lost with an intake crash (RECORD_BOUND_S).
# With the flush each check that carried records waited for the disk, one at a time.
UNFLUSHED_RECORDS = {"synchronous_commit": "off"}


async def open_check_pool(url: str, stop: asyncio.Event | None = None) -> asyncpg.Pool:
    """The checks' pool: one connection (one check statement runs at a time, Batched),
    planning every statement generically (services.pg_pool.GENERIC_PLANS), its records not
    waiting for the WAL's flush (UNFLUSHED_RECORDS); StoppedStarting once `stop` is set
    while it waits for Postgres (services.postgres_start)."""
    return await open_pool(
        url,
        stop=stop,
        min_size=1,
        max_size=1,
        server_settings=GENERIC_PLANS | UNFLUSHED_RECORDS,
    )


class DeliveryBatches:
    """`pool` claims drift reports, `checks` (from `open_check_pool`) looks the deliveries up
    and records them."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        checks: asyncpg.Pool,
        horizon: timedelta,
        own: Collection[tuple[str, str]],
    ) -> None:
        self._pool = pool
        self._check_pool = checks
        self._horizon = horizon
        self._own = own
        self._purged_at = 0.0
        self._checks: Batched[Asked, Delivery] = Batched(checks, self._look_up)
        # Handled and answered, not written yet: the next statement's to record.
        self._unwritten: dict[tuple[str, str], datetime] = {}
        self._writer: asyncio.Task[None] | None = None
        self.claims = Slots(DRIFT_CLAIMS)

    async def look_up(self, asked: Asked) -> Delivery:
        """webhook_store.look_up_all's answer for `asked`; `seen` at once for a delivery
        this intake handled and has not written yet."""
        if (asked.account, asked.delivery_id) in self._unwritten:
            return Delivery(seen=True, matched=None)
        return await self._checks.ask(asked)

    def remember(self, account: str, delivery_id: str, at: datetime) -> None:
        """Record the delivery as handled by `account` (as webhook_store.Deliveries.provider
        names it): with the next check's statement, or alone RECORD_BOUND_S from now if no
        check comes. Until then this intake answers its retries `duplicate` from memory."""
        self._unwritten[(account, delivery_id)] = at
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_soon())

    async def close(self) -> None:
        """Write what is left, before the pools close (the intake stopping)."""
        if self._writer is not None:
            self._writer.cancel()
            with suppress(asyncio.CancelledError):
                await self._writer
        await self.write()

    @asynccontextmanager
    async def reporting(self, drift_id: str, kind: str, at: datetime) -> AsyncIterator[bool]:
        """Whether this delivery is to report `drift_id` (produce it inside the block): the
        drift scan's own claim (reconcilers.store.claiming_reports), one judge of "already
        reported" for both reporters, so a webhook arriving after the scan reported its
        stray, or at the same instant, produces it no second time. Remembered as reported
        when the block ends. Not batched: the claim's transaction stays open while the
        drift is produced, and a delivery that reports drift is rare; ApiError 503, before
        anything is asked, while DRIFT_CLAIMS others are held."""
        with self.claims.take("drift reports being claimed"):
            async with (
                self._pool.acquire() as conn,
                drift_store.claiming_reports(conn, [(drift_id, kind, at)]) as claimed,
            ):
                yield drift_id in claimed

    async def _look_up(self, conn: asyncpg.Connection, asked: Sequence[Asked]) -> list[Delivery]:
        """The checks of `asked`, carrying the records not written yet."""
        handled, self._unwritten = self._unwritten, {}
        if handled:
            crash_point(INTAKE_ANSWERED_UNRECORDED)
        try:
            found = await webhook_store.look_up_all(conn, asked, self._own, handled)
        except BaseException as exc:
            if asked or not isinstance(exc, VALUE_ERRORS):
                # For the next statement (newer records win); a check refused for its
                # own value is run alone next (Batched), the records with the first.
                self._unwritten = handled | self._unwritten
            else:  # the records' own values: no statement would take them
                log.error("webhook deliveries not recorded, refused: %r: %s", exc, handled)
            raise
        if handled:
            await self._purge(conn)
        return found

    async def _write_soon(self) -> None:
        try:
            await asyncio.sleep(RECORD_BOUND_S)
            await self.write()
        except Exception as exc:  # kept: the next statement carries them, or the stop
            log.warning("recording %d webhook deliveries failed: %r", len(self._unwritten), exc)
            self._writer = None
            return
        # Records made while this one was written wait for a bound of their own.
        self._writer = asyncio.create_task(self._write_soon()) if self._unwritten else None

    async def write(self) -> None:
        """The deliveries answered so far recorded, by a statement of their own if no check
        carries them first (none left: no statement)."""
        async with self._check_pool.acquire() as conn:
            if self._unwritten:
                await self._look_up(conn, [])

    async def _purge(self, conn: asyncpg.Connection) -> None:
        if time.monotonic() - self._purged_at < PURGE_EVERY_S:
            return
        self._purged_at = time.monotonic()
        before = datetime.now(UTC) - self._horizon
        deleted = await webhook_store.purge_deliveries(conn, before)
        log.debug("purged webhook deliveries older than %s: %s", before.isoformat(), deleted)
