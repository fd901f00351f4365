"""How each projected table is written: its columns, its conflict target and what a
conflict updates. One statement per table, used two ways by projections.writer:

- row by row (`upsert_sql` with executemany): the live projector's small batches;
- in bulk (`copy_rows`): the rows go by COPY into a temporary table, then one
  `INSERT ... SELECT` with the same ON CONFLICT clause. audit rebuild's large batches.

Both write the same rows. Within one batch executemany applies rows in order, so for
rows that share a conflict key the first one inserts and each later one either does
nothing (events) or updates only the `update` columns. One INSERT ... SELECT cannot touch
a row twice, so `merge_by_key` first folds such rows into one in exactly that way: the
first row, with the `update` columns of the last (and for DO NOTHING, the first alone).
A conflict on another unique column (an event_id under another key: corruption) fails
the batch either way.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    update: tuple[str, ...]  # empty: ON CONFLICT DO NOTHING
    jsonb: tuple[str, ...] = ()


TABLES = {
    t.name: t
    for t in (
        Table(
            "events",
            (
                "tenant",
                "tx_id",
                "seq",
                "event_id",
                "type",
                "schema_version",
                "causation_id",
                "correlation_id",
                "occurred_at",
                "occurred_at_text",
                "prev_hash",
                "hash",
                "data",
                "canon",
            ),
            key=("tenant", "tx_id", "seq"),
            update=(),
            jsonb=("data",),
        ),
        Table(
            "transactions",
            ("tenant", "tx_id", "status", "agent_id", "last_seq", "created_at", "updated_at"),
            key=("tenant", "tx_id"),
            update=("status", "last_seq", "updated_at"),
        ),
        Table(
            "operations",
            (
                "tenant",
                "tx_id",
                "action",
                "position",
                "kind",
                "provider",
                "operation",
                "op_key",
                "state",
                "attempts",
                "remote_id",
                "evidence",
                "updated_at",
                "comp_op_key",
                "comp_state",
                "comp_attempts",
                "open_review_id",
            ),
            key=("tenant", "tx_id", "action"),
            update=(
                "state",
                "attempts",
                "remote_id",
                "evidence",
                "updated_at",
                "comp_op_key",
                "comp_state",
                "comp_attempts",
                "open_review_id",
            ),
            jsonb=("evidence",),
        ),
        Table(
            "reviews",
            (
                "id",
                "tenant",
                "tx_id",
                "action",
                "leg",
                "op_key",
                "attempt",
                "reason",
                "state",
                "created_at",
                "resolved_at",
                "resolution",
                "note",
                "actor",
            ),
            key=("id",),
            update=("state", "resolved_at", "resolution", "note", "actor"),
        ),
    )
}


def _conflict(table: Table) -> str:
    target = f" ON CONFLICT ({', '.join(table.key)}) DO "
    if not table.update:
        return target + "NOTHING"
    return target + "UPDATE SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in table.update)


def upsert_sql(name: str) -> str:
    """The row-by-row statement: one row of parameters, jsonb columns cast from text."""
    table = TABLES[name]
    values = ", ".join(
        f"${i}::jsonb" if c in table.jsonb else f"${i}" for i, c in enumerate(table.columns, 1)
    )
    return f"INSERT INTO {name} ({', '.join(table.columns)}) VALUES ({values})" + _conflict(table)


def merge_by_key(name: str, rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The rows as applying them one after another would leave them, one per key."""
    table = TABLES[name]
    key_at = [table.columns.index(c) for c in table.key]
    update_at = [table.columns.index(c) for c in table.update]
    merged: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        key = tuple(row[i] for i in key_at)
        first = merged.get(key)
        if first is None:
            merged[key] = list(row)
        else:
            for i in update_at:
                first[i] = row[i]
    return [tuple(row) for row in merged.values()]


async def copy_rows(conn: asyncpg.Connection, name: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Write `rows` as executemany(upsert_sql(name), rows) would, inside the caller's
    transaction."""
    if not rows:
        return
    table = TABLES[name]
    staging = f"bulk_{name}"
    # Temporary, per connection; emptied at each commit. jsonb columns arrive as the same
    # text the row-by-row statement casts, and are cast the same way by the SELECT.
    types = await _types_of(conn, name)
    columns = ", ".join(f"{c} {'text' if c in table.jsonb else types[c]}" for c in table.columns)
    await conn.execute(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {staging} ({columns}) ON COMMIT DELETE ROWS"
    )
    await conn.copy_records_to_table(
        staging, records=merge_by_key(name, rows), columns=list(table.columns)
    )
    select = ", ".join(f"{c}::jsonb" if c in table.jsonb else c for c in table.columns)
    await conn.execute(
        f"INSERT INTO {name} ({', '.join(table.columns)}) SELECT {select} FROM {staging}"
        + _conflict(table)
    )


async def _types_of(conn: asyncpg.Connection, table: str) -> dict[str, str]:
    """The columns' types as the database declares them (the schema is applied by
    statements that alter tables, so the database is where they are written down)."""
    rows = await conn.fetch(
        "SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute"
        " WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped",
        table,
    )
    return {r["attname"]: r["type"] for r in rows}
