"""services.intake.delivery_batches against a real Postgres: webhooks that reach the
dedupe check or the record of their delivery id at the same time share one statement,
each gets its own answer, and a record returns only once its own row is written (the
ingress answers 2xx after it: services.intake.webhooks). And the check is not planned
again at every call once the tables it reads have grown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from support import large_tables

from services.intake.delivery_batches import DeliveryBatches, open_check_pool
from services.intake.webhook_store import DELIVERIES, Asked
from services.pg_pool import create_pool

HORIZON = timedelta(days=3)


@pytest.fixture
async def pool(fresh_database: str) -> AsyncIterator[asyncpg.Pool]:
    # One connection: every statement of the batches goes through it, logged.
    pool = await create_pool(fresh_database, min_size=1, max_size=1)
    try:
        yield pool
    finally:
        await pool.close()


async def logged(pool: asyncpg.Pool) -> list[str]:
    statements: list[str] = []
    async with pool.acquire() as conn:
        conn.add_query_logger(lambda query: statements.append(query.query))
    return statements


async def test_concurrent_records_share_a_statement_and_each_waits_for_its_row(
    pool: asyncpg.Pool, fresh_database: str
) -> None:
    statements = await logged(pool)
    batches = DeliveryBatches(pool, pool, HORIZON, ())
    reader = await asyncpg.connect(fresh_database)
    reading = asyncio.Lock()  # one connection reads for every webhook
    at = datetime.now(UTC)
    seen_on_return: list[bool] = []

    async def deliver(account: str, delivery_id: str) -> None:
        await batches.remember(account, delivery_id, at)
        async with reading:
            row = await reader.fetchval(
                "SELECT count(*) FROM webhook_deliveries WHERE provider = $1 AND delivery_id = $2",
                account,
                delivery_id,
            )
        seen_on_return.append(row == 1)

    try:
        # 20 webhooks at once, one of them a provider's retry arriving with the first.
        ids = [("sandbox", f"evt_{n}") for n in range(18)] + [("acme/sandbox", "evt_0")]
        await asyncio.gather(*(deliver(a, d) for a, d in [*ids, ("sandbox", "evt_3")]))
        await asyncio.sleep(0)  # the query logger's callbacks run on the loop

        assert seen_on_return == [True] * 20
        rows = await reader.fetch("SELECT provider, delivery_id FROM webhook_deliveries")
        assert sorted((r["provider"], r["delivery_id"]) for r in rows) == sorted(ids)
    finally:
        await reader.close()
    inserts = [s for s in statements if "INSERT INTO webhook_deliveries" in s]
    # All 20 were waiting when the writer first ran: one statement, one row per id.
    assert len(inserts) == 1


async def test_concurrent_checks_share_a_statement_and_each_gets_its_own_answer(
    pool: asyncpg.Pool,
) -> None:
    batches = DeliveryBatches(pool, pool, HORIZON, ())
    now = datetime.now(UTC)
    await batches.remember("sandbox", "evt_old", now)
    statements = await logged(pool)
    asked = [
        Asked("sandbox" if n % 2 else "acme/sandbox", "evt_old", now - HORIZON, "sandbox", ())
        for n in range(10)
    ]

    answers = await asyncio.gather(*(batches.look_up(a) for a in asked))
    await asyncio.sleep(0)

    # Handled by the shared account only, not by acme's own.
    assert [answer.seen for answer in answers] == [bool(n % 2) for n in range(10)]
    assert len([s for s in statements if "webhook_deliveries" in s]) == 1


async def test_checks_are_not_planned_again_once_the_tables_have_grown(
    fresh_database: str,
) -> None:
    # An intake that starts on near-empty tables (a new deployment, the benchmark's
    # warm-up) makes its first plans there; by Postgres's default choice the check was
    # then planned at almost every call once the tables had grown and been analysed.
    checks = await open_check_pool(fresh_database)
    try:
        batches = DeliveryBatches(checks, checks, HORIZON, ())
        since = datetime.now(UTC) - HORIZON

        async def check(n: int) -> None:
            await batches.look_up(Asked("sandbox", f"evt_{n}", since, "sandbox", (f"rk1_c{n}",)))

        async def planned() -> int:
            async with checks.acquire() as conn:
                count: int = await conn.fetchval(
                    "SELECT custom_plans FROM pg_prepared_statements WHERE statement = $1",
                    DELIVERIES,
                )
            return count

        for n in range(6):
            await check(n)
        before = await planned()
        async with checks.acquire() as conn:
            await large_tables.fill(conn, 3000)
            await conn.execute("ANALYZE")
        for n in range(6, 12):
            await check(n)

        assert await planned() == before
    finally:
        await checks.close()
