"""The readers of the few legs in flight (the reconciler's begun calls, its oldest-unknown
gauge, the console's attention counts) read `operations` by index, not whole, however large
the table has grown with finished transactions: each runs at every reconciler pass or
console page, and the OR of the two legs' states could not use the compensation's partial
index until its branch carried the index's predicate (projections.operation_row.
either_leg_in). The plans are Postgres's first, with the values (custom plans), on a table
of finished operations with a few legs in flight, analysed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from support import large_tables

from reconcilers.store import BEGUN
from services.intake.tenant_store import ATTENTION
from services.pull_reconciler.gauges import OLDEST_UNKNOWN

ROWS = 3000


@pytest.fixture
async def conn(fresh_database: str) -> AsyncIterator[asyncpg.Connection]:
    async with large_tables.filled(fresh_database, ROWS) as conn:
        # A few legs in flight among the finished: forward legs and compensations.
        await conn.execute("UPDATE operations SET state = 'unknown' WHERE tx_id IN ('p-1', 'p-2')")
        await conn.execute(
            "UPDATE operations SET state = 'dispatched', comp_state = 'dispatched',"
            " comp_attempts = 1 WHERE tx_id = 'p-3'"
        )
        await conn.execute(
            "UPDATE operations SET state = 'unknown', comp_state = 'unknown',"
            " comp_attempts = 1 WHERE tx_id = 'p-4'"
        )
        # p-3's two calls were begun (large_tables begins only its intents' forward calls).
        await conn.execute(
            "INSERT INTO calls_begun (tenant, op_key, leg, attempt)"
            " VALUES ('acme', 'rk1_p3', 'forward', 1), ('acme', 'rc1_p3', 'compensation', 1)"
        )
        await conn.execute("ANALYZE operations; ANALYZE calls_begun")
        yield conn


@pytest.mark.parametrize(
    ("query", "types", "values"),
    [
        (BEGUN, "text", "'dispatched'"),
        (OLDEST_UNKNOWN, "text", "'unknown'"),
        (ATTENTION, "text", "'acme'"),
    ],
    ids=["begun", "oldest_unknown", "attention"],
)
async def test_a_reader_of_the_legs_in_flight_reads_operations_by_index(
    conn: asyncpg.Connection, query: str, types: str, values: str
) -> None:
    plan = await large_tables.plan(conn, query, types, values, verbose=False)

    assert "Seq Scan on operations" not in plan, plan
    assert "operations_by_state" in plan and "operations_comp_dispatched" in plan, plan


async def test_the_readers_find_both_legs_in_flight(conn: asyncpg.Connection) -> None:
    attention = await conn.fetchrow(ATTENTION, "acme")
    begun = await conn.fetch(BEGUN, "dispatched")
    oldest = await conn.fetchval(OLDEST_UNKNOWN, "unknown")

    assert attention["unknown"] == 3  # p-1, p-2 (forward legs) and p-4 (both legs, one row)
    assert sorted((r["op_key"], r["leg"]) for r in begun) == [
        ("rc1_p3", "compensation"),
        ("rk1_p3", "forward"),
    ]
    assert oldest is not None and oldest >= 0
