"""services.intake.delivery_batches against a real Postgres: webhooks that reach the
dedupe check at the same time share one statement and each gets its own answer; the
deliveries answered are recorded by the next check's statement, or by one of their own
within the bound, or at the stop, and answered `duplicate` from memory until then; a
failed statement's records go with the next. And the check is not planned again at every
call once the tables it reads have grown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from support import large_tables
from support.delivery_rows import rows

from services.intake.delivery_batches import RECORD_BOUND_S, DeliveryBatches, open_check_pool
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


@pytest.fixture
async def batches(pool: asyncpg.Pool) -> AsyncIterator[DeliveryBatches]:
    batches = DeliveryBatches(pool, pool, HORIZON, ())
    try:
        yield batches
    finally:
        await batches.close()


@pytest.fixture
async def reader(fresh_database: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of the test's own, to read what the batches wrote."""
    conn = await asyncpg.connect(fresh_database)
    try:
        yield conn
    finally:
        await conn.close()


async def logged(pool: asyncpg.Pool) -> list[str]:
    statements: list[str] = []
    async with pool.acquire() as conn:
        conn.add_query_logger(lambda query: statements.append(query.query))
    return statements


def _ours(statements: list[str]) -> list[str]:
    """The batches' checks and records (not asyncpg's reading of the types, nor the purge of
    old rows, once a minute)."""
    return [s for s in statements if "webhook_deliveries" in s and "DELETE" not in s]


async def test_deliveries_answered_ride_the_next_check_and_their_retries_are_duplicates(
    pool: asyncpg.Pool, batches: DeliveryBatches, reader: asyncpg.Connection
) -> None:
    statements = await logged(pool)
    at = datetime.now(UTC)
    since = at - HORIZON
    # 19 deliveries answered, one of them a provider's retry arriving with the first.
    ids = [("sandbox", f"evt_{n}") for n in range(18)] + [("acme/sandbox", "evt_0")]
    for account, delivery_id in [*ids, ("sandbox", "evt_3")]:
        batches.remember(account, delivery_id, at)
    # A retry of one of them before anything is written: answered from memory.
    retry = await batches.look_up(Asked("sandbox", "evt_3", since, "sandbox", ()))
    await asyncio.sleep(0)  # the query logger's callbacks run on the loop
    assert (retry.seen, _ours(statements)) == (True, [])
    assert await rows(reader) == []

    fresh = await batches.look_up(Asked("sandbox", "evt_new", since, "sandbox", ()))
    await asyncio.sleep(0)

    assert not fresh.seen
    # The new delivery's check carried every record: one statement, one row per id.
    assert len(_ours(statements)) == 1
    assert await rows(reader) == sorted(ids)


async def test_deliveries_no_check_carries_are_written_by_a_statement_of_their_own(
    pool: asyncpg.Pool, batches: DeliveryBatches, reader: asyncpg.Connection
) -> None:
    statements = await logged(pool)
    at = datetime.now(UTC)
    for n in range(3):
        batches.remember("sandbox", f"evt_{n}", at)
    async with asyncio.timeout(10):
        while len(await rows(reader)) < 3:
            await asyncio.sleep(RECORD_BOUND_S / 4)
    # Written once, and nothing more while nothing else comes.
    await asyncio.sleep(2 * RECORD_BOUND_S)

    assert await rows(reader) == [("sandbox", f"evt_{n}") for n in range(3)]
    assert len(_ours(statements)) == 1


async def test_the_stop_writes_what_is_not_written_yet(
    batches: DeliveryBatches, reader: asyncpg.Connection
) -> None:
    batches.remember("sandbox", "evt_last", datetime.now(UTC))

    await batches.close()

    assert await rows(reader) == [("sandbox", "evt_last")]


async def test_records_a_failed_statement_carried_go_with_the_next(
    batches: DeliveryBatches, reader: asyncpg.Connection
) -> None:
    at = datetime.now(UTC)
    batches.remember("sandbox", "evt_kept", at)
    # The table refuses the record for the first check: it fails, as a Postgres that went
    # away would fail it.
    await reader.execute("ALTER TABLE webhook_deliveries ADD CHECK (delivery_id <> 'evt_kept')")
    with pytest.raises(asyncpg.CheckViolationError):
        await batches.look_up(Asked("sandbox", "evt_a", at - HORIZON, "sandbox", ()))
    await reader.execute(
        "ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_delivery_id_check"
    )
    await batches.look_up(Asked("sandbox", "evt_b", at - HORIZON, "sandbox", ()))

    assert await rows(reader) == [("sandbox", "evt_kept")]


async def test_concurrent_checks_share_a_statement_and_each_gets_its_own_answer(
    pool: asyncpg.Pool, batches: DeliveryBatches
) -> None:
    now = datetime.now(UTC)
    batches.remember("sandbox", "evt_old", now)
    await batches.write()
    statements = await logged(pool)
    asked = [
        Asked("sandbox" if n % 2 else "acme/sandbox", "evt_old", now - HORIZON, "sandbox", ())
        for n in range(10)
    ]

    answers = await asyncio.gather(*(batches.look_up(a) for a in asked))
    await asyncio.sleep(0)

    # Handled by the shared account only, not by acme's own: Postgres's answer.
    assert [answer.seen for answer in answers] == [bool(n % 2) for n in range(10)]
    assert len(_ours(statements)) == 1


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
