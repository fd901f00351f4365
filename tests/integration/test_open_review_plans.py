"""The reconciler's gauges of the open reviews (services.pull_reconciler.gauges.OPEN_REVIEWS,
every 15 s) read only the open reviews, by their partial index (migration 0005), however
many reviews history has resolved: `reviews` keeps them all, and its other index leads with
the tenant, which a count across tenants cannot seek (Postgres 15, the deployment image's,
read the whole table or index; 18 skip-scans it once per tenant). Real Postgres, its plan
with the tables analysed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from services.pull_reconciler.gauges import OPEN_REVIEWS

ROWS = 3000


@pytest.fixture
async def conn(fresh_database: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(fresh_database)
    try:
        # Reviews of 30 tenants over a month, 3 still open: the newest an hour old, the
        # oldest 501 hours.
        await conn.execute(
            """
            INSERT INTO reviews (id, tenant, tx_id, action, leg, op_key, attempt, reason,
                                 state, created_at, resolved_at)
            SELECT 'rv-' || n, 't' || (n % 30), 'tx-' || n, 'charge', 'forward', 'rk1_c' || n,
                   1, 'unknown', CASE WHEN n % 1000 = 0 THEN 'open' ELSE 'resolved' END,
                   now() - n * interval '15 minutes' + interval '249 hours', now()
            FROM generate_series(1, $1) n
            """,
            ROWS,
        )
        await conn.execute("ANALYZE reviews")
        yield conn
    finally:
        await conn.close()


async def test_the_open_reviews_are_read_by_their_own_index(conn: asyncpg.Connection) -> None:
    for mode in ("auto", "force_generic_plan"):
        await conn.execute(f"SET plan_cache_mode = {mode}")
        plan = "\n".join(row[0] for row in await conn.fetch(f"EXPLAIN {OPEN_REVIEWS}"))

        assert "Seq Scan on reviews" not in plan, plan
        assert "reviews_open" in plan, plan


async def test_the_gauges_count_the_open_reviews_and_the_oldest_ones_age(
    conn: asyncpg.Connection,
) -> None:
    reviews = await conn.fetchrow(OPEN_REVIEWS)

    assert reviews["open"] == 3
    # The oldest open one (n = 3000) was opened 750 - 249 = 501 hours ago.
    assert 501 * 3600 - 60 < reviews["age"] < 501 * 3600 + 60
