"""services.intake.shared_statement against a real Postgres: batches run back to back share
one connection from the pool, and a statement that broke its connection fails only the
callers it carried; the next batch runs on another connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import asyncpg
import pytest

from services.intake.shared_statement import Batched
from services.pg_pool import create_pool


class CountingPool:
    """The pool, counting the connections taken from it."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.acquired = 0

    def acquire(self) -> Any:
        self.acquired += 1
        return self.pool.acquire()


@pytest.fixture
async def pool(fresh_database: str) -> AsyncIterator[CountingPool]:
    pool = await create_pool(fresh_database, min_size=1, max_size=1)
    try:
        yield CountingPool(pool)
    finally:
        await pool.close()


async def test_batches_run_back_to_back_take_one_connection(pool: CountingPool) -> None:
    first_runs = asyncio.Event()
    go_on = asyncio.Event()
    batches: list[list[int]] = []

    async def run(conn: asyncpg.Connection, items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        if len(batches) == 1:
            first_runs.set()
            await go_on.wait()
        return [await conn.fetchval("SELECT $1::int * 2", item) for item in items]

    shared: Batched[int, int] = Batched(cast(asyncpg.Pool, pool), run)
    first = asyncio.create_task(shared.ask(1))
    await first_runs.wait()
    # These arrive while the first statement runs: they go together in the next.
    later = [asyncio.create_task(shared.ask(n)) for n in (2, 3)]
    await asyncio.sleep(0)
    go_on.set()

    assert await first == 2
    assert [await task for task in later] == [4, 6]
    assert batches == [[1], [2, 3]]
    assert pool.acquired == 1


async def test_a_broken_connection_fails_its_batch_and_the_next_takes_another(
    pool: CountingPool,
) -> None:
    first_runs = asyncio.Event()
    go_on = asyncio.Event()
    calls = 0

    async def run(conn: asyncpg.Connection, items: Sequence[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            first_runs.set()
            await go_on.wait()
            # Postgres ends this session under the statement (a restart, a killed backend).
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return [await conn.fetchval("SELECT $1::int + 1", item) for item in items]

    shared: Batched[int, int] = Batched(cast(asyncpg.Pool, pool), run)
    first = asyncio.create_task(shared.ask(1))
    await first_runs.wait()
    later = asyncio.create_task(shared.ask(2))
    await asyncio.sleep(0)
    go_on.set()

    with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
        await first
    # Waiting when the first broke: answered from a connection of its own, not the dead one.
    assert await later == 3
    assert pool.acquired == 2


async def test_a_value_the_statement_refuses_fails_only_its_own_caller(
    pool: CountingPool,
) -> None:
    # A NUL Postgres cannot store, and a lone surrogate asyncpg cannot send, among values
    # that are fine: the webhooks' delivery ids or keys of different senders sharing a statement.
    statements: list[list[str]] = []

    async def run(conn: asyncpg.Connection, items: Sequence[str]) -> list[str]:
        statements.append(list(items))
        return list(
            await conn.fetchval("SELECT array_agg(upper(v)) FROM unnest($1::text[]) v", items)
        )

    shared: Batched[str, str] = Batched(cast(asyncpg.Pool, pool), run)
    asked = ["a", "nul\x00", "b", "lone\ud800", "c"]
    answers = await asyncio.gather(*(shared.ask(v) for v in asked), return_exceptions=True)

    assert [answers[0], answers[2], answers[4]] == ["A", "B", "C"]
    assert isinstance(answers[1], asyncpg.CharacterNotInRepertoireError)
    assert isinstance(answers[3], asyncpg.DataError)
    assert isinstance(answers[3].__cause__, UnicodeEncodeError)
    # One statement for all, refused; then one each, on the same connection.
    assert statements == [asked, *([v] for v in asked)]
    assert pool.acquired == 1
