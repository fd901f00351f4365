"""The webhook ingress's statements (services.intake.webhook_store: the dedupe check with
the match, and recording the delivery id), each shared by the webhooks that reach it at the
same time (issue 24); and for a delivery that reports drift, the claim of its report
(reconcilers.store.claiming_reports), which is not shared: it holds its connection while
the drift is produced, so at most DRIFT_CLAIMS are held at once.

While one statement runs, the webhooks that arrive at the same step wait and go together in
the next: an idle intake sends each at once, a busy one one statement (and, for the
record, one commit) for many deliveries. No wait is added to make a batch, and the order of
a webhook's steps stays (services.intake.webhooks): its check answers before anything is
produced, and it answers 2xx only once the statement carrying its own row has been written.
A statement that fails fails each webhook it carried, as its own statement would have.

Rows older than the dedupe horizon are deleted at most every PURGE_EVERY_S, after a record,
on the same connection.

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
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import asyncpg

from reconcilers import store as drift_store
from services.intake import webhook_store
from services.intake.shared_statement import Batched
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

# account (Deliveries.provider), delivery id, when.
Handled = tuple[str, str, datetime]


async def open_check_pool(url: str, stop: asyncio.Event | None = None) -> asyncpg.Pool:
    """The checks' pool: one connection (one check statement runs at a time, Batched),
    planning every statement generically (services.pg_pool.GENERIC_PLANS); StoppedStarting
    once `stop` is set while it waits for Postgres (services.postgres_start)."""
    return await open_pool(url, stop=stop, min_size=1, max_size=1, server_settings=GENERIC_PLANS)


class DeliveryBatches:
    """`pool` records the deliveries, `checks` (from `open_check_pool`) looks them up."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        checks: asyncpg.Pool,
        horizon: timedelta,
        own: Collection[tuple[str, str]],
    ) -> None:
        self._pool = pool
        self._horizon = horizon
        self._own = own
        self._purged_at = 0.0
        self._checks: Batched[Asked, Delivery] = Batched(checks, self._look_up)
        self._records: Batched[Handled, None] = Batched(pool, self._remember)
        self.claims = Slots(DRIFT_CLAIMS)

    async def look_up(self, asked: Asked) -> Delivery:
        """webhook_store.look_up_all's answer for `asked`."""
        return await self._checks.ask(asked)

    async def remember(self, account: str, delivery_id: str, at: datetime) -> None:
        """Once this returns, the delivery is recorded as handled by `account` (as
        webhook_store.Deliveries.provider names it); the statement's error otherwise."""
        await self._records.ask((account, delivery_id, at))

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
        return await webhook_store.look_up_all(conn, asked, self._own)

    async def _remember(self, conn: asyncpg.Connection, handled: Sequence[Handled]) -> list[None]:
        # A delivery twice in one statement (a provider retrying while the first is being
        # handled) is one row: ON CONFLICT cannot touch a row twice in a statement.
        await webhook_store.remember_deliveries(conn, {(a, d): at for a, d, at in handled})
        await self._purge(conn)
        return [None] * len(handled)

    async def _purge(self, conn: asyncpg.Connection) -> None:
        if time.monotonic() - self._purged_at < PURGE_EVERY_S:
            return
        self._purged_at = time.monotonic()
        before = datetime.now(UTC) - self._horizon
        deleted = await webhook_store.purge_deliveries(conn, before)
        log.debug("purged webhook deliveries older than %s: %s", before.isoformat(), deleted)
