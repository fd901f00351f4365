"""services.intake.produced_marks against a real Postgres: submissions acknowledged by Kafka
at the same time mark their intents produced in one statement, and each mark returns only
once its own row is marked (the submission answers 202 after it: services.intake.accept;
GET and abort read an unprojected intent only when it is marked). A row whose body was
replaced meanwhile is not marked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from support.txbuilders import submit

from services.intake import intents
from services.intake.produced_marks import ProducedMarks
from services.pg_pool import create_pool

TENANT = "demo"


@pytest.fixture
async def pool(fresh_database: str) -> AsyncIterator[asyncpg.Pool]:
    # One connection: every statement of the marks goes through it, logged.
    pool = await create_pool(fresh_database, min_size=1, max_size=1)
    try:
        yield pool
    finally:
        await pool.close()


async def test_concurrent_marks_share_a_statement_and_each_waits_for_its_row(
    pool: asyncpg.Pool, fresh_database: str
) -> None:
    operations = submit(["reserve"]).operations
    claimed = [
        intents.Intent(TENANT, f"tx-{n}", "f" * 64, "agent-1", operations) for n in range(12)
    ]
    async with pool.acquire() as conn:
        for intent in claimed:
            await intents.claim(conn, intent, horizon_s=30)
        statements: list[str] = []
        conn.add_query_logger(lambda query: statements.append(query.query))
    # Another body of tx-11 took its row over meanwhile: that mark must not touch it.
    stale = intents.Intent(TENANT, "tx-11", "e" * 64, "agent-1", operations)
    marks = ProducedMarks(pool)
    reader = await asyncpg.connect(fresh_database)
    reading = asyncio.Lock()  # one connection reads for every submission
    produced_on_return: list[tuple[str, str, bool]] = []

    async def acknowledged(intent: intents.Intent) -> None:
        await marks.mark(intent)
        async with reading:
            produced = await reader.fetchval(
                "SELECT produced FROM intents WHERE tenant = $1 AND tx_id = $2",
                intent.tenant,
                intent.tx_id,
            )
        produced_on_return.append((intent.tx_id, intent.fingerprint[0], produced))

    try:
        # A retry of tx-0 acknowledged with the first.
        await asyncio.gather(*(acknowledged(i) for i in [*claimed[:11], claimed[0], stale]))
        await asyncio.sleep(0)  # the query logger's callbacks run on the loop

        assert sorted(produced_on_return) == sorted(
            [(f"tx-{n}", "f", True) for n in [*range(11), 0]] + [("tx-11", "e", False)]
        )
        rows = await reader.fetch("SELECT tx_id, produced FROM intents ORDER BY tx_id")
        assert {r["tx_id"]: r["produced"] for r in rows} == {
            **{f"tx-{n}": True for n in range(11)},
            "tx-11": False,
        }
    finally:
        await reader.close()
    marking = [s for s in statements if "produced = true" in s]
    # All 13 were waiting when the first ran: one statement.
    assert len(marking) == 1


async def test_two_intakes_marking_the_same_rows_in_opposite_orders_do_not_deadlock(
    fresh_database: str,
) -> None:
    # A client retrying at another intake while the first is marking: both statements name
    # tx-a and tx-b, in opposite orders. A third connection holds tx-b's row so that the
    # second statement queues for tx-b first and the first statement, arriving after it,
    # takes tx-a: taken in the order named, each would then hold what the other waits for.
    operations = submit(["reserve"]).operations
    a, b = (intents.Intent(TENANT, tx, "f" * 64, "agent-1", operations) for tx in ("tx-a", "tx-b"))
    first, second, holder = [await asyncpg.connect(fresh_database) for _ in range(3)]
    try:
        for intent in (a, b):
            await intents.claim(first, intent, horizon_s=30)
        for conn in (first, second):
            # The plan of a large intents table: an index lookup per row named, in the
            # order named (a two-row table would be scanned in its own order).
            await conn.execute(
                "SET enable_seqscan = off; SET enable_hashjoin = off;"
                " SET enable_mergejoin = off; SET deadlock_timeout = '100ms'"
            )
        holding = holder.transaction()
        await holding.start()
        await holder.execute("SELECT 1 FROM intents WHERE tx_id = 'tx-b' FOR UPDATE")
        b_first = asyncio.create_task(intents.mark_all_produced(second, [b, a]))
        await asyncio.sleep(0.3)
        a_first = asyncio.create_task(intents.mark_all_produced(first, [a, b]))
        await asyncio.sleep(0.3)
        await holding.rollback()

        await asyncio.wait_for(asyncio.gather(b_first, a_first), timeout=10)
        rows = await holder.fetch("SELECT produced FROM intents")
        assert [r["produced"] for r in rows] == [True, True]
    finally:
        for conn in (first, second, holder):
            await conn.close()
