"""The releases of calls that ended after their partition was revoked (services.
dispatcher.held_leases, the rare path), gathered for RELEASE_WINDOW_S and cleared in
Postgres by one statement.

Why gathered: a rebalance revokes every partition at once, so every call on the wire then
(up to executor.MAX_CONCURRENT_CALLS) ends in the seconds after it. A release only lets a
waiting claim go on sooner (it polls every CLAIM_POLL_S), so a short delay costs a claimer
at most that. (Until the holder was the process, every call released its lease this way:
3.00 statements per transaction at c30 one by one, 0.26-0.29 gathered.)

A release that is lost (the process dies with releases pending, or the statement fails) is
a lease that lapses on its own: the claimer waits longer, nothing is called twice.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# How long releases gather before their statement: well under a claim's poll (0.25 s).
RELEASE_WINDOW_S = 0.05

Row = tuple[str, str, str, int]  # (tenant, op_key, leg, attempt)
Release = tuple[Row, str]  # a row and the holder whose lease it clears


class LeaseReleases:
    def __init__(self, run: Callable[[list[Release]], Awaitable[None]]) -> None:
        self._run = run
        self._pending: list[Release] = []
        self._waiting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, row: Row, holder: str) -> None:
        """Never waits: the call that ended goes on with its answer."""
        self._pending.append((row, holder))
        if self._waiting is None:
            self._waiting = asyncio.get_running_loop().create_task(self._later())
            self._tasks.add(self._waiting)
            self._waiting.add_done_callback(self._tasks.discard)

    async def _later(self) -> None:
        await asyncio.sleep(RELEASE_WINDOW_S)
        # Releases added while this statement runs start a window of their own.
        self._waiting = None
        await self.flush()

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        try:
            await self._run(pending)
        except Exception as error:
            log.warning("releasing %d call leases failed (%r); they lapse", len(pending), error)

    async def close(self) -> None:
        """At the host's stop: what is pending is released now, best effort."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._waiting = None
        await self.flush()
