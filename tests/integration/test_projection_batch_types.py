"""The live projector's write statement sends each table's rows as one array of the
table's batch type (migration 0006, `Table.batch_type`): the types hold the written
columns with the tables' types, and the statement leaves the rows that audit rebuild's
bulk path (COPY, then the same ON CONFLICT) leaves, over generated logs split into
batches at random."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.decider_scenarios import scenarios
from support.txbuilders import log_of, observed, submit

from events.envelope import Envelope
from events.inputs import Outcome
from projections.table_writes import TABLES
from projections.view_cache import ViewCache
from projections.writer import Record, project_batch

TOPIC = "recon.events"
WRITTEN = ("events", "transactions", "operations", "reviews", "projection_offsets")


async def test_the_batch_types_hold_the_written_columns_with_the_tables_types(
    fresh_database: str,
) -> None:
    conn = await asyncpg.connect(fresh_database)
    try:
        for name, table in TABLES.items():
            columns = await conn.fetch(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type"
                " FROM pg_attribute a WHERE a.attrelid = $1::regclass"
                " AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                name,
            )
            of_table = {r["attname"]: r["type"] for r in columns}
            fields = await conn.fetch(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type"
                " FROM pg_type t JOIN pg_attribute a ON a.attrelid = t.typrelid"
                " WHERE t.typname = $1 AND a.attnum > 0 AND NOT a.attisdropped"
                " ORDER BY a.attnum",
                table.batch_type,
            )
            assert [(r["attname"], r["type"]) for r in fields] == [
                (c, of_table[c]) for c in table.columns
            ], name
    finally:
        await conn.close()


def _other_transaction() -> list[Envelope]:
    # Interleaved with the generated one, so that batches hold two transactions.
    return log_of(
        submit(["reserve", "charge"], ("receipt",), tx_id="tx-2"),
        observed("reserve", 1, Outcome.SUCCEEDED, n=0, tx_id="tx-2"),
        observed("charge", 1, Outcome.UNKNOWN, n=1, tx_id="tx-2"),
        observed("charge", 1, Outcome.SUCCEEDED, n=2, tx_id="tx-2"),
        tx_id="tx-2",
    )


@st.composite
def batched_records(draw: st.DrawFn) -> list[list[Record]]:
    """A generated transaction's log on partition 0 and another's on partition 1, merged
    in a drawn order and cut into batches of drawn sizes."""
    logs = [log_of(*draw(scenarios())), _other_transaction()]
    taken = [0, 0]
    records: list[Record] = []
    while taken[0] < len(logs[0]) or taken[1] < len(logs[1]):
        left = [p for p in (0, 1) if taken[p] < len(logs[p])]
        p = draw(st.sampled_from(left))
        records.append((p, taken[p], logs[p][taken[p]]))
        taken[p] += 1
    batches = []
    while records:
        size = draw(st.integers(1, 12))
        batches.append(records[:size])
        records = records[size:]
    return batches


async def _rows(conn: asyncpg.Connection) -> dict[str, list[dict[str, Any]]]:
    return {
        table: [dict(r) for r in await conn.fetch(f"SELECT * FROM {table} ORDER BY 1, 2, 3")]
        for table in WRITTEN
    }


async def _live_and_bulk(url: str, batches: list[list[Record]]) -> tuple[Any, Any]:
    conn = await asyncpg.connect(url)
    try:
        live = await _written_then_undone(conn, batches, bulk=False)
        return live, await _written_then_undone(conn, batches, bulk=True)
    finally:
        await conn.close()


async def _written_then_undone(
    conn: asyncpg.Connection, batches: list[list[Record]], *, bulk: bool
) -> dict[str, list[dict[str, Any]]]:
    """The rows one path writes from empty tables, read inside a transaction that is then
    rolled back, so the other path and the next example start from empty tables again.
    project_batch's own transactions become savepoints in it and see the rows written
    before them, as committed ones would be seen; the bulk path's staging tables (ON
    COMMIT DELETE ROWS) are created and dropped with it. Two TRUNCATEs of five tables per
    example were half of this test's time."""
    tx = conn.transaction()
    await tx.start()
    try:
        if bulk:
            await project_batch(conn, TOPIC, [r for batch in batches for r in batch], bulk=True)
        else:
            cache = ViewCache()
            for batch in batches:
                await project_batch(conn, TOPIC, batch, cache=cache)
        return await _rows(conn)
    finally:
        await tx.rollback()


# One database for every example: each path's rows are rolled back once read.
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batched_records())
def test_the_live_statement_writes_the_rows_of_the_bulk_path(
    fresh_database: str, batches: list[list[Record]]
) -> None:
    live, bulk = asyncio.run(_live_and_bulk(fresh_database, batches))

    assert live == bulk
