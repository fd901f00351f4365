"""Recording handled webhook deliveries (services.intake.webhook_store.remember_deliveries)
for every webhook that reached that step at the same time, in one statement (issue 24).

A webhook's delivery id is recorded after Kafka acknowledged its observation and before
its 2xx (services.intake.webhooks, step 4): that order stays, each webhook waits for the
statement that carries its own row. What changes is that the webhooks handled at the same
time share it: while one statement is being written, the ids that arrive wait and go
together in the next, so an idle intake writes at once and a busy one writes one
statement (and one commit) for many deliveries. No wait is added to make a batch.

Rows older than the dedupe horizon are deleted at most every PURGE_EVERY_S by the same
writer, on the same connection.
"""

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

import asyncpg

from services.intake import webhook_store

log = logging.getLogger(__name__)

# Old delivery ids are deleted at most this often per intake process: cheap, and the
# table never holds much more than one horizon of deliveries.
PURGE_EVERY_S = 60.0

Waiting = dict[tuple[str, str], datetime]


class DeliveryRecords:
    def __init__(self, pool: asyncpg.Pool, horizon: timedelta) -> None:
        self._pool = pool
        self._horizon = horizon
        self._rows: Waiting = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._purged_at = 0.0

    async def remember(self, account: str, delivery_id: str, at: datetime) -> None:
        """Once this returns, the delivery is recorded as handled by `account` (as
        webhook_store.Deliveries.provider names it); the statement's error otherwise."""
        # A delivery twice in one statement (a provider retrying while the first is being
        # written) is one row: ON CONFLICT cannot touch a row twice in a statement.
        self._rows[(account, delivery_id)] = at
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(done)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_while_waiting())
        await done

    async def _write_while_waiting(self) -> None:
        while self._waiters:
            rows, waiters = self._rows, self._waiters
            self._rows, self._waiters = {}, []
            try:
                async with self._pool.acquire() as conn:
                    await webhook_store.remember_deliveries(conn, rows)
                    await self._purge(conn)
            except asyncio.CancelledError:  # the intake stopping
                for waiter in waiters:
                    waiter.cancel()
                raise
            except Exception as exc:  # each webhook answers for it (a 503 for a database down)
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
            else:
                for waiter in waiters:
                    if not waiter.done():  # a webhook whose client went away
                        waiter.set_result(None)

    async def _purge(self, conn: asyncpg.Connection) -> None:
        if time.monotonic() - self._purged_at < PURGE_EVERY_S:
            return
        self._purged_at = time.monotonic()
        before = datetime.now(UTC) - self._horizon
        deleted = await webhook_store.purge_deliveries(conn, before)
        log.debug("purged webhook deliveries older than %s: %s", before.isoformat(), deleted)
