"""The one rule for a Postgres transaction that stays open across another system's round
trip (a Kafka produce and its acknowledgement): Postgres ends it once it sat idle, waiting on
its holder, longer than a bound the caller sizes against that round trip's own timeouts.

Why: what such a transaction holds (a row it inserted, updated or deleted; an advisory lock)
makes every other writer of the same rows wait until it ends. A holder that is killed has
its socket closed by its kernel, and Postgres rolls the transaction back at once. A holder
whose host is lost, whose network to Postgres is cut, or whose process froze (SIGSTOP, a
hung VM) leaves the socket open: nothing in recon sets keepalives or timeouts on its
connections, so Postgres keeps the session, idle in transaction, until the kernel's
keepalive gives up on the peer (about two hours by default), and the waiters wait as long.
With the bound, Postgres ends the holder's session instead (`idle_in_transaction_session_
timeout`), the transaction rolls back, and the waiters go on, as after a crash before the
commit: each caller says what that crash does on its path.

Set for the transaction only (`set_config(..., is_local)`): the pooled connection goes back
as it was, so a transaction that is not held across a round trip is never cut by it. The
bound counts idle time between statements, not a statement's own run (a statement waiting
on a lock is not idle): it cuts only a holder that stopped sending.

Here, in the lowest folder of Postgres code that both reconcilers/ and services/ import
(tests/unit/test_rooms.py), so that the rule has one copy.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import asyncpg

# An hour: a bound meant to cut a holder that stopped, not a live one; anything longer is a
# mistake in the caller's sizing (seconds given as milliseconds, say).
LONGEST_IDLE_BOUND_S = 3600.0


def idle_bound_ms(idle_bound_s: float) -> str:
    """The setting's value for a bound in seconds; ValueError unless more than 0 and at
    most LONGEST_IDLE_BOUND_S (Postgres reads 0 as "no bound")."""
    if not 0 < idle_bound_s <= LONGEST_IDLE_BOUND_S:
        raise ValueError(
            f"an idle bound is more than 0 and at most {LONGEST_IDLE_BOUND_S:.0f} s,"
            f" got {idle_bound_s!r}"
        )
    # At least 1 ms: a bound under half a millisecond would round to 0, no bound.
    return f"{max(1, round(idle_bound_s * 1000))}ms"


@asynccontextmanager
async def held_open(
    conn: asyncpg.Connection,
    idle_bound_s: float,
    *,
    isolation: Literal["read_committed", "repeatable_read"] | None = None,
    readonly: bool = False,
) -> AsyncIterator[None]:
    """A transaction on `conn` (committed when the block ends, rolled back on an error in
    it) that Postgres ends, with the holder's session, once it sits idle longer than
    `idle_bound_s`. The caller runs its other system's round trip inside the block.
    `isolation` and `readonly` as asyncpg's `transaction()` takes them (a snapshot read
    held while the caller reads elsewhere: audit compare)."""
    bound = idle_bound_ms(idle_bound_s)
    async with conn.transaction(isolation=isolation, readonly=readonly):
        await conn.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', $1, true)", bound
        )
        yield
