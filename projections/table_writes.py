"""How each projected table is written: its columns, its conflict target and what a
conflict updates. One statement per table, used two ways by projections.writer:

- from one array of rows (`unnest_upsert_sql`): the live projector's batches, every row
  of a table in one `INSERT ... SELECT FROM unnest(...)` of the table's batch type (an
  executemany per table, as before, was one execution per row for the server: 20-30 per
  recon transaction at c30; one array per column cost asyncpg a Python check per value);
- in bulk (`copy_rows`): the rows go by COPY into a temporary table, then one
  `INSERT ... SELECT` with the same ON CONFLICT clause. audit rebuild's large batches.

Both write the rows as applying them one by one in order would: for rows that share a
conflict key the first one inserts and each later one either does nothing (events) or
updates only the `update` columns. One INSERT ... SELECT cannot touch a row twice, so
`merge_by_key` first folds such rows into one in exactly that way: the first row, with
the `update` columns of the last (and for DO NOTHING, the first alone).
A conflict on another unique column (an event_id under another key: corruption) fails
the batch either way.
"""

import json
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    update: tuple[str, ...]  # empty: ON CONFLICT DO NOTHING
    # The composite type of a row of `columns`, with the table's column types, that the
    # live projector sends the rows as (migration 0006): one array parameter per table.
    # asyncpg checks each element of an array against collections.abc.Iterable, a Python
    # call per value when the rows went as one array per column.
    batch_type: str
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
            batch_type="events_batch_v1",
        ),
        Table(
            "transactions",
            (
                "tenant",
                "tx_id",
                "status",
                "agent_id",
                "last_seq",
                "created_at",
                "updated_at",
                "owner",
                "session_events",
                "session_seq",
            ),
            key=("tenant", "tx_id"),
            update=("status", "last_seq", "updated_at", "owner", "session_events", "session_seq"),
            jsonb=("owner",),
            batch_type="transactions_batch_v2",
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
            batch_type="operations_batch_v1",
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
            batch_type="reviews_batch_v1",
        ),
    )
}


# orjson refuses here what json.dumps would spell otherwise or refuse too (a subclass, a
# datetime, a dataclass; an integer beyond 64 bits; a lone surrogate): json.dumps decides.
_ORJSON_STRICT = (
    orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
)


def jsonb_text(value: Any) -> str:
    """The text a jsonb column's value travels as. Postgres parses it into jsonb, which
    keeps no spacing, key order or escapes, so any spelling of the same JSON value stores
    the same thing: orjson's, ~4x faster than json.dumps (an event's data and an
    operation's evidence trail were a tenth of the projector's CPU). The values are JSON
    read back or dumped in JSON mode (no NaN: the decider cannot seal one), and anything
    orjson would write differently from json.dumps goes to json.dumps."""
    try:
        return orjson.dumps(value, option=_ORJSON_STRICT).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value)


def _conflict(table: Table) -> str:
    target = f" ON CONFLICT ({', '.join(table.key)}) DO "
    if not table.update:
        return target + "NOTHING"
    return target + "UPDATE SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in table.update)


def unnest_upsert_sql(name: str, param: int, where: str = "") -> str:
    """The statement writing a table's rows from parameter `$param`, an array of the
    table's batch type (`merge_by_key` gives its rows): the row-by-row statement's ON
    CONFLICT, applied to rows merged by key. `where`: a condition every row is written
    under (SQL, may be empty). jsonb values travel as their text (`jsonb_text`), which
    Postgres parses into the type's jsonb fields."""
    table = TABLES[name]
    columns = ", ".join(table.columns)
    return (
        f"INSERT INTO {name} ({columns}) SELECT {columns}"
        f" FROM unnest(${param}::{table.batch_type}[])"
        + (f" WHERE {where}" if where else "")
        + _conflict(table)
    )


async def column_types(conn: asyncpg.Connection, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """The SQL types of the tables' columns, by table, read from the database in one
    statement."""
    rows = await conn.fetch(
        "SELECT attrelid::regclass::text AS table, attname,"
        " format_type(atttypid, atttypmod) AS type FROM pg_attribute"
        " WHERE attrelid = ANY($1::regclass[]) AND attnum > 0 AND NOT attisdropped",
        list(names),
    )
    types: dict[str, dict[str, str]] = {name: {} for name in names}
    for r in rows:
        types[r["table"]][r["attname"]] = r["type"]
    return types


def merge_by_key(name: str, rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The rows as applying them one after another would leave them, one per key. A row
    is kept as given unless a later one shares its key: the live projector's batches
    repeat no key (each event, view and moved operation has its own row), and copying
    every row into a list and back cost it 14.7 us per transaction at c30 (3.2 now)."""
    key_of, update_at = _MERGE[name]
    merged: dict[Any, tuple[Any, ...]] = {}
    for row in rows:
        key = key_of(row)
        first = merged.get(key)
        if first is None:
            merged[key] = row
        elif update_at:
            merged[key] = tuple(
                row[i] if i in update_at else value for i, value in enumerate(first)
            )
    return list(merged.values())


def _merge_plan(table: Table) -> tuple[Callable[[tuple[Any, ...]], Any], frozenset[int]]:
    """How merge_by_key reads a row of `table`: its key, and the positions a later row
    with the same key updates."""
    key_of = operator.itemgetter(*(table.columns.index(c) for c in table.key))
    return key_of, frozenset(table.columns.index(c) for c in table.update)


_MERGE = {name: _merge_plan(table) for name, table in TABLES.items()}


async def copy_rows(conn: asyncpg.Connection, name: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Write `rows` as `unnest_upsert_sql` would, inside the caller's transaction."""
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
    return (await column_types(conn, [table]))[table]
