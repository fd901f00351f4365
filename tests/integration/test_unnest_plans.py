"""The statements that unnest array parameters on every transaction's path are planned once
per connection, not at every call (services/unnest_params.py): Postgres plans a prepared
statement's first five executions with their values and keeps the generic plan after them
only if it is costed no higher, which a parameter array unnest counts in the custom plans
only used to prevent. And the generic plan each keeps still reaches the rows it needs
through an index, on tables large enough for a scan to be a real choice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from support import large_tables

from services.governance.store import agents_of
from services.intake.intents import Intent, mark_all_produced
from services.intake.webhook_store import Asked, look_up_all

ROWS = 3000


@pytest.fixture
async def conn(fresh_database: str) -> AsyncIterator[asyncpg.Connection]:
    async with large_tables.filled(fresh_database, ROWS) as conn:
        yield conn


async def run_each_batch_statement(conn: asyncpg.Connection, times: int) -> None:
    """A webhook's lookup, a dispatch's authority read and the marks of acknowledged
    submissions, `times` times each, with batches of one as under light load (the size a
    custom plan would count)."""
    since = datetime.now(UTC) - timedelta(days=1)
    for n in range(1, times + 1):
        await look_up_all(conn, [Asked("sandbox", f"whd-x{n}", since, "sandbox", (f"rk1_c{n}",))])
        await agents_of(conn, [("acme", f"tx-{n}")])
        await mark_all_produced(conn, [Intent("acme", f"tx-{n}", "f", "agent", ())])


async def batch_statements(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """The connection's prepared statements that unnest parameters, this one excepted."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT statement, parameter_types::text[] AS types, generic_plans, custom_plans"
        " FROM pg_prepared_statements WHERE statement LIKE '%unnest(%'"
        " AND statement NOT LIKE '%pg_prepared_statements%'"
    )
    return rows


async def test_each_batch_statement_is_planned_for_its_first_five_calls_only(
    conn: asyncpg.Connection,
) -> None:
    await run_each_batch_statement(conn, times=8)

    planned = await batch_statements(conn)

    assert len(planned) == 3, planned
    for row in planned:
        assert (row["custom_plans"], row["generic_plans"]) == (5, 3), row


async def test_the_generic_plan_of_each_batch_statement_scans_no_large_table(
    conn: asyncpg.Connection,
) -> None:
    await run_each_batch_statement(conn, times=1)
    await conn.execute("SET plan_cache_mode = force_generic_plan")

    for row in await batch_statements(conn):
        types = row["types"]
        await conn.execute(f"PREPARE batch ({', '.join(types)}) AS {row['statement']}")
        # A generic plan does not depend on the values: NULLs stand for any.
        nulls = ", ".join(["NULL"] * len(types))
        plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN EXECUTE batch ({nulls})"))
        await conn.execute("DEALLOCATE batch")

        assert "Index" in plan, plan
        for table in large_tables.TABLES:
            assert f"Seq Scan on {table}" not in plan, plan
