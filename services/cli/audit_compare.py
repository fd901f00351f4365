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

That snapshot is held on the LIVE database: while it is open, a migration's ALTER TABLE
waits for it (and every statement on that table queues behind the ALTER), and vacuum cannot
remove what it may still see. So it holds nothing but the live side's reads: the rebuilt
side is read before it opens, the rows are decoded and compared after it ends, and it is
opened through projections.held_open, which has Postgres end it once it sits idle longer
than SNAPSHOT_IDLE_BOUND_S: a compare whose process froze, or whose host was lost with the
socket open, would otherwise hold it until the kernel's keepalive gave up (about two
hours); and it sets tcp_user_timeout for a compare frozen while Postgres still sends it a
result, which is not idle. A live compare is idle inside it only between its statements,
and reads what it is sent. Cut, the compare
stops with an AuditError that says so (exit 2); it never wrote anything to the live side.
"""

import asyncio
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import asyncpg

from projections.held_open import held_open, idle_bound_ms
from projections.offsets import load_offsets
from services.cli.log_snapshot import AuditError
from services.config import Settings
from services.crash_points import AUDIT_COMPARE_IN_SNAPSHOT, pause_point

Row = dict[str, Any]
TxKey = tuple[str, str]
# Rows as fetched, and which of their columns are json/jsonb: decoded once the live snapshot
# has ended, so that decoding a large table never keeps the snapshot idle.
Fetched = tuple[list[asyncpg.Record], frozenset[str]]

# The live snapshot's idle bound. A live compare is idle in it only between its statements
# (asyncpg building the last result's rows: milliseconds, a second or two for millions of
# events); a compare idle this long has stopped. Short, because a migration's ALTER TABLE
# waits on the snapshot and every statement on that table waits behind the ALTER.
SNAPSHOT_IDLE_BOUND_S = 30.0

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


async def _fetch_raw(conn: asyncpg.Connection, sql: str, *args: Any) -> Fetched:
    statement = await conn.prepare(sql)
    rows = await statement.fetch(*args)
    jsonb = {a.name for a in statement.get_attributes() if a.type.name in ("json", "jsonb")}
    return rows, frozenset(jsonb)


def _decoded(fetched: Fetched) -> list[Row]:
    rows, jsonb = fetched
    return [
        {k: json.loads(v) if k in jsonb and isinstance(v, str) else v for k, v in row.items()}
        for row in rows
    ]


async def _fetch(conn: asyncpg.Connection, sql: str, *args: Any) -> list[Row]:
    return _decoded(await _fetch_raw(conn, sql, *args))


async def _rows_of(conn: asyncpg.Connection, table: str, last_seqs: dict[TxKey, int]) -> Fetched:
    extra = " AND t.seq <= s.last_seq" if table == "events" else ""
    tenants, tx_ids = [k[0] for k in last_seqs], [k[1] for k in last_seqs]
    return await _fetch_raw(
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


async def compare(
    settings: Settings,
    rebuilt: asyncpg.Connection,
    wait_s: float,
    idle_bound_s: float = SNAPSHOT_IDLE_BOUND_S,
) -> list[str]:
    live = await asyncpg.connect(settings.database_url)
    try:
        topics = [settings.topics.events, settings.topics.drift]
        differences = await _wait_for_live(live, rebuilt, topics, wait_s)
        snapshot, theirs = await _read_rebuilt(rebuilt)
        ours = await _read_live(live, snapshot, theirs, idle_bound_s)
        return differences + _compare_tables(snapshot, ours, theirs)
    finally:
        await live.close()


# The tables compared by transaction (their rows of the settled transactions only).
_BY_TX_TABLES = ("transactions", "operations", "reviews")


@dataclass(frozen=True)
class _Side:
    """One database's rows of what the rebuild holds, as fetched (decoded when compared)."""

    tables: dict[str, Fetched]  # _BY_TX_TABLES, "events" and "drift"


async def _read_rebuilt(rebuilt: asyncpg.Connection) -> tuple[dict[TxKey, int], _Side]:
    """The rebuild's last seq per transaction, and its rows: no one else writes it, so no
    snapshot is needed."""
    snapshot = {
        (r["tenant"], r["tx_id"]): r["last_seq"]
        for r in await _fetch(rebuilt, "SELECT tenant, tx_id, last_seq FROM transactions")
    }
    tables = {table: await _rows_of(rebuilt, table, snapshot) for table in _BY_TX_TABLES}
    tables["events"] = await _rows_of(rebuilt, "events", snapshot)
    tables["drift"] = await _fetch_raw(rebuilt, "SELECT * FROM drift")
    return snapshot, _Side(tables)


async def _read_live(
    live: asyncpg.Connection, snapshot: dict[TxKey, int], theirs: _Side, idle_bound_s: float
) -> _Side:
    """The live side's rows of what the rebuild holds, in one snapshot: statements only."""
    drift_ids = [r["drift_id"] for r in theirs.tables["drift"][0]]
    tables: dict[str, Fetched] = {}
    try:
        async with held_open(live, idle_bound_s, isolation="repeatable_read", readonly=True):
            # A compare that froze while Postgres still sends it a result (the events rows)
            # leaves Postgres blocked writing to the socket, active, not idle: no idle bound
            # cuts it, nor statement_timeout. TCP_USER_TIMEOUT does: the kernel of Postgres'
            # host gives the connection up once what it sent stays unread (a zero window, or
            # no ACK from a lost host) that long. A live compare reads on.
            await live.execute(
                "SELECT set_config('tcp_user_timeout', $1, true)", idle_bound_ms(idle_bound_s)
            )
            for table in _BY_TX_TABLES:
                tables[table] = await _rows_of(live, table, snapshot)
            await pause_point(AUDIT_COMPARE_IN_SNAPSHOT)
            tables["events"] = await _rows_of(live, "events", snapshot)
            tables["drift"] = await _fetch_raw(
                live, "SELECT * FROM drift WHERE drift_id = ANY($1::text[])", drift_ids
            )
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as error:
        if not live.is_closed():
            raise
        raise AuditError(_snapshot_ended(error, idle_bound_s)) from error
    return _Side(tables)


def _first_cause(error: BaseException) -> BaseException:
    """The error the read first met: leaving the transaction on a closed connection raises
    its own, which would hide the server's reason (the idle timeout)."""
    while isinstance(error.__context__, (asyncpg.PostgresError, asyncpg.InterfaceError)):
        error = error.__context__
    return error


def _snapshot_ended(error: Exception, idle_bound_s: float) -> str:
    return (
        f"the live database ended this compare's read of it ({_first_cause(error)}). The "
        f"compare sent or read nothing there for longer than {idle_bound_s:.0f} s, so this "
        "process was stopped or its network to the live database was cut, and Postgres let "
        "its snapshot go so that it holds back no migration and no vacuum. Nothing was "
        "written; the rebuild in --into is complete but a rebuild refuses a database that "
        "holds rows: to compare again, give --into a fresh, empty database (or drop and "
        "create it) and run `audit rebuild --compare` again, from a host with a steady "
        "connection to the live database"
    )


def _compare_tables(snapshot: dict[TxKey, int], ours: _Side, theirs: _Side) -> list[str]:
    live_seq = {(r["tenant"], r["tx_id"]): r["last_seq"] for r in ours.tables["transactions"][0]}
    moved_on = {key for key, seq in snapshot.items() if live_seq.get(key, 0) > seq}
    if moved_on:
        print(
            f"audit compare: {len(moved_on)} transactions moved on after the snapshot; "
            "only their events up to it are compared: "
            + ", ".join(f"{t}/{tx}" for t, tx in sorted(moved_on)),
            file=sys.stderr,
        )

    def settled(rows: list[Row]) -> list[Row]:
        return [r for r in rows if (r["tenant"], r["tx_id"]) not in moved_on]

    differences: list[str] = []
    for table in _BY_TX_TABLES:
        live_rows, rebuilt_rows = _decoded(ours.tables[table]), _decoded(theirs.tables[table])
        differences += diff_rows(table, settled(live_rows), settled(rebuilt_rows))
    for table in ("events", "drift"):
        differences += diff_rows(
            table, _decoded(ours.tables[table]), _decoded(theirs.tables[table])
        )
    return differences
