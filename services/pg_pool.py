"""recon's Postgres connection pools: asyncpg's, without the reset query on every release.

asyncpg returns a connection to its pool after `SELECT pg_advisory_unlock_all(); CLOSE ALL;
UNLISTEN *; RESET ALL;`: a round trip (and four statements for Postgres) per acquire, which
was most of the intake's Postgres round trips per webhook. recon leaves nothing of that on
a session: its advisory locks are transaction-scoped (pg_advisory_xact_lock), it opens no
cursor outside a transaction, listens to nothing and sets no session variable. What does
matter stays: asyncpg still rolls back a transaction left open and drops listeners before
this reset runs (Pool's release calls Connection._reset first).
"""

from typing import Any

import asyncpg


async def _nothing_to_reset(connection: asyncpg.Connection) -> None:
    return None


async def create_pool(dsn: str, **options: Any) -> asyncpg.Pool:
    pool: asyncpg.Pool = await asyncpg.create_pool(dsn, reset=_nothing_to_reset, **options)
    return pool


# The session settings of a pool whose statements are planned once per connection (the
# generic plan) instead of at almost every call. Postgres keeps a prepared statement's
# generic plan only if it costs no more than the average of its first five custom plans,
# made with the values (a batch's arrays of one to three, where the generic plan guesses 10)
# and on the tables as they were then: a statement whose generic plan never wins is planned
# again at every call (docs/benchmark.md, "Statements planned at every call").
#
# A plan made once is kept, and run on the tables as they grow, until an ANALYZE of one of
# them: autovacuum's, after 50 rows + 10 % changed, at its naptime (a minute). On a young
# database's small tables (never analysed, or analysed at a few dozen rows) a Seq Scan or a
# hash of a whole table is what costs least, so a plan made there read every row per
# execution as the tables grew: the webhook checks read 980-1,440 blocks per transaction
# over a benchmark's first 600 transactions, ~40 once planned on grown tables (docs/
# benchmark.md, "Plans made on a young database"). Turned off, those nodes are taken only
# where no index serves; the statements run on these pools reach every table by index, and
# their plan made on a young database's tables is tested to, run on grown ones
# (test_begin_plan, test_webhook_lookup_plans).
GENERIC_PLANS = {
    "plan_cache_mode": "force_generic_plan",
    "enable_seqscan": "off",
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
}


async def ping(conn: asyncpg.Connection) -> None:
    """A round trip that reads nothing: whether Postgres answers on this connection."""
    await conn.fetchval("SELECT 1")


# What a query raises when Postgres went away under it (or restarted mid-protocol): the
# dispatcher treats these as "the projection is unavailable" and retries, never exits.
# InternalClientError ("cannot switch to state N") was seen in a 10,000-transaction chaos
# run after a Postgres restart; asyncpg raises it from a connection left mid-protocol.
UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)
