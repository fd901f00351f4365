"""`audit rebuild --compare`: the rebuilt projection against the live one, row by row.

Every column is compared; none is ignored. No projected column is process-local: the
times come from the envelopes (occurred_at) and the drift reports (detected_at), never
from the projector's clock, and the offsets table is not a projection of the log (it is
where one projector stands), so it is only used to wait for the live one to catch up.

The scope is what the rebuild holds. The live projector keeps running while we compare, so
a transaction that has moved on past the rebuild's snapshot (its live last_seq is higher)
has only its events compared up to the snapshot's seq, and rows the live database holds
for transactions or drift newer than the snapshot are not differences. The live side is
read in one REPEATABLE READ transaction, so its tables are consistent with each other.
"""

import asyncio
import json
import sys
from collections.abc import Iterable
from typing import Any

import asyncpg

from projections.offsets import load_offsets
from services.config import Settings

Row = dict[str, Any]
TxKey = tuple[str, str]

KEYS: dict[str, tuple[str, ...]] = {
    "transactions": ("tenant", "tx_id"),
    "operations": ("tenant", "tx_id", "action"),
    "reviews": ("id",),
    "events": ("tenant", "tx_id", "seq"),
    "drift": ("drift_id",),
}

# The rows of the given transactions, up to a seq per transaction ($3; events only).
_BY_TX = (
    "SELECT t.* FROM {table} t JOIN unnest($1::text[], $2::text[], $3::int[])"
    " AS s(tenant, tx_id, last_seq) ON t.tenant = s.tenant AND t.tx_id = s.tx_id{extra}"
)


async def _fetch(conn: asyncpg.Connection, sql: str, *args: Any) -> list[Row]:
    statement = await conn.prepare(sql)
    rows = await statement.fetch(*args)
    jsonb = {a.name for a in statement.get_attributes() if a.type.name in ("json", "jsonb")}
    return [
        {k: json.loads(v) if k in jsonb and isinstance(v, str) else v for k, v in row.items()}
        for row in rows
    ]


async def _rows_of(conn: asyncpg.Connection, table: str, last_seqs: dict[TxKey, int]) -> list[Row]:
    extra = " AND t.seq <= s.last_seq" if table == "events" else ""
    tenants, tx_ids = [k[0] for k in last_seqs], [k[1] for k in last_seqs]
    return await _fetch(
        conn,
        _BY_TX.format(table=table, extra=extra),
        tenants,
        tx_ids,
        list(last_seqs.values()),
    )


def _key(table: str, row: Row) -> tuple[Any, ...]:
    return tuple(row[c] for c in KEYS[table])


def _label(table: str, key: tuple[Any, ...]) -> str:
    return f"{table} {'/'.join(str(k) for k in key)}"


def diff_rows(table: str, live: Iterable[Row], rebuilt: Iterable[Row]) -> list[str]:
    live_by = {_key(table, r): r for r in live}
    rebuilt_by = {_key(table, r): r for r in rebuilt}
    out: list[str] = []
    for key in sorted(live_by.keys() | rebuilt_by.keys(), key=repr):
        a, b = live_by.get(key), rebuilt_by.get(key)
        if a is None:
            out.append(f"{_label(table, key)}: in the rebuild, missing from the live database")
        elif b is None:
            out.append(f"{_label(table, key)}: in the live database, missing from the rebuild")
        else:
            for column in sorted(a.keys() | b.keys()):
                if a.get(column) != b.get(column):
                    out.append(
                        f"{_label(table, key)}: {column}: live {a.get(column)!r}, "
                        f"rebuilt {b.get(column)!r}"
                    )
    return out


async def _wait_for_live(
    live: asyncpg.Connection, rebuilt: asyncpg.Connection, topics: list[str], wait_s: float
) -> list[str]:
    """Wait (up to wait_s) until the live projector has read at least what the rebuild
    read; what is still behind then is a difference."""
    wanted = {topic: await load_offsets(rebuilt, topic) for topic in topics}
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        behind = []
        for topic, offsets in wanted.items():
            stored = await load_offsets(live, topic)
            for partition, offset in sorted(offsets.items()):
                if stored.get(partition, 0) < offset:
                    behind.append(
                        f"live projection of {topic}[{partition}] is at offset "
                        f"{stored.get(partition, 0)}, the rebuild read up to {offset}"
                    )
        if not behind or asyncio.get_running_loop().time() >= deadline:
            return behind
        await asyncio.sleep(0.5)


async def compare(settings: Settings, rebuilt: asyncpg.Connection, wait_s: float) -> list[str]:
    live = await asyncpg.connect(settings.database_url)
    try:
        topics = [settings.topics.events, settings.topics.drift]
        differences = await _wait_for_live(live, rebuilt, topics, wait_s)
        async with live.transaction(isolation="repeatable_read", readonly=True):
            differences += await _compare_tables(live, rebuilt)
        return differences
    finally:
        await live.close()


async def _compare_tables(live: asyncpg.Connection, rebuilt: asyncpg.Connection) -> list[str]:
    snapshot = {
        (r["tenant"], r["tx_id"]): r["last_seq"]
        for r in await _fetch(rebuilt, "SELECT tenant, tx_id, last_seq FROM transactions")
    }
    live_seq = {
        (r["tenant"], r["tx_id"]): r["last_seq"]
        for r in await _rows_of(live, "transactions", snapshot)
    }
    moved_on = {key for key, seq in snapshot.items() if live_seq.get(key, 0) > seq}
    if moved_on:
        print(
            f"audit compare: {len(moved_on)} transactions moved on after the snapshot; "
            "only their events up to it are compared: "
            + ", ".join(f"{t}/{tx}" for t, tx in sorted(moved_on)),
            file=sys.stderr,
        )
    settled = {key: seq for key, seq in snapshot.items() if key not in moved_on}
    differences: list[str] = []
    for table in ("transactions", "operations", "reviews"):
        differences += diff_rows(
            table, await _rows_of(live, table, settled), await _rows_of(rebuilt, table, settled)
        )
    differences += diff_rows(
        "events",
        await _rows_of(live, "events", snapshot),
        await _rows_of(rebuilt, "events", snapshot),
    )
    rebuilt_drift = await _fetch(rebuilt, "SELECT * FROM drift")
    live_drift = await _fetch(
        live,
        "SELECT * FROM drift WHERE drift_id = ANY($1::text[])",
        [r["drift_id"] for r in rebuilt_drift],
    )
    differences += diff_rows("drift", live_drift, rebuilt_drift)
    return differences
