"""The gate's pools open once, however many calls ask for them at once: the calls of several
partitions start together at a take, and each of them that found no pool opened one, of
which only the last was kept (and closed); the others held their connections for the life
of the process. Real Postgres: the connections counted are pg_stat_activity's."""

import asyncio

import asyncpg

from events.topics import Topics
from services.config import Settings
from services.dispatcher.gatekeeper import Gatekeeper

# Calls asking at once, for each pool: as many as the partitions of a take.
CALLERS = 8


async def test_the_gate_pools_open_once_and_close_with_the_gate(fresh_database: str) -> None:
    settings = Settings(
        kafka_bootstrap="", database_url=fresh_database, topics=Topics(""), environment="test"
    )
    gate = Gatekeeper(settings, None)  # no review is asked, no producer
    observer = await asyncpg.connect(fresh_database)
    try:
        opened = await asyncio.gather(
            *(gate._pool() for _ in range(CALLERS)),
            *(gate._begin_pool() for _ in range(CALLERS)),
        )
        # min_size=1 each: one connection per pool, besides the observer's.
        assert await _connections(observer) == 2, "a pool was opened more than once"
        assert len({id(pool) for pool in opened}) == 2
        await gate.close()
        # A closed connection's backend ends a moment after: counted until it has.
        assert await _connections(observer, settled_at=0) == 0, "the gate left connections open"
    finally:
        await gate.close()
        await observer.close()


async def _connections(observer: asyncpg.Connection, settled_at: int | None = None) -> int:
    """Connections to the test's database but the observer's own; with `settled_at`, counted
    again for up to 5 s until there are that many."""
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        count: int = await observer.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        if settled_at in (None, count) or asyncio.get_running_loop().time() > deadline:
            return count
        await asyncio.sleep(0.05)
