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
remove what it may still see. Its length is the price of the compare's memory bound: the
compare holds one slice of each side at a time (services.cli.audit_compare_slices), never
a whole database, so the snapshot is open for the whole compare, from the first slice's
live read to the last. Inside it the compare reads a slice's rows of both sides at once
(the live side is never idle while the rebuild's rows come), then decodes and compares
them; the live side is idle only for that work, milliseconds a slice. It is opened
through projections.held_open, which has Postgres end it once it sits idle longer than
SNAPSHOT_IDLE_BOUND_S: a compare whose process froze, or whose host was lost with the
socket open, would otherwise hold it until the kernel's keepalive gave up (about two
hours); and it sets tcp_user_timeout for a compare frozen while Postgres still sends it a
result, which is not idle. Cut, the compare stops with an
AuditError that says so (exit 2); it never wrote anything to the live side.
"""

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from time import monotonic as clock
from typing import Any

import asyncpg

from projections.held_open import held_open, idle_bound_ms
from projections.offsets import load_offsets
from services.cli.audit_compare_found import Found, Row
from services.cli.audit_compare_slices import DEFAULT_SLICE, Slice, SliceSize, slices_of
from services.cli.log_snapshot import AuditError
from services.config import Settings
from services.crash_points import AUDIT_COMPARE_IN_SNAPSHOT, pause_point

TxKey = tuple[str, str]
# Rows as fetched, and which of their columns are json/jsonb.
Fetched = tuple[list[asyncpg.Record], frozenset[str]]

# The live snapshot's idle bound. A live compare is idle in it only between its statements
# (one slice's rows decoded and compared, the next slice's rebuilt rows read:
# milliseconds); a compare idle this long has stopped. Short, because a migration's ALTER TABLE
# waits on the snapshot and every statement on that table waits behind the ALTER.
SNAPSHOT_IDLE_BOUND_S = 30.0

# The rows of a slice's transactions (transactions, operations, reviews).
_BY_TX = (
    "SELECT t.* FROM {table} t JOIN unnest($1::text[], $2::text[])"
    " AS s(tenant, tx_id) ON t.tenant = s.tenant AND t.tx_id = s.tx_id"
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


@dataclass
class Held:
    """What a compare read and the most it held at once, counted (rows of both sides): the
    memory bound of the slices is on `most_rows`."""

    slices: int = 0
    rows: int = 0
    most_rows: int = 0
    # How long the live snapshot was open, and the longest it sat idle between two slices'
    # live reads (the next slice's rebuilt rows read, the last one's compared).
    snapshot_s: float = 0.0
    longest_idle_s: float = 0.0

    def add(self, ours: "_SliceRows", theirs: "_SliceRows") -> None:
        self.rows += _rows(ours) + _rows(theirs)
        self.most_rows = max(self.most_rows, _rows(ours) + _rows(theirs))


async def compare(
    settings: Settings,
    rebuilt: asyncpg.Connection,
    wait_s: float,
    idle_bound_s: float = SNAPSHOT_IDLE_BOUND_S,
    size: SliceSize = DEFAULT_SLICE,
    held: Held | None = None,
) -> list[str]:
    """The differences between the rebuild and the live database, in the order they are
    printed; `held` (when given) counts what the compare read."""
    held = held if held is not None else Held()
    live = await asyncpg.connect(settings.database_url)
    try:
        topics = [settings.topics.events, settings.topics.drift]
        differences = await _wait_for_live(live, rebuilt, topics, wait_s)
        found, moved_on = Found(), set[TxKey]()
        try:
            async with held_open(live, idle_bound_s, isolation="repeatable_read", readonly=True):
                # A compare that froze while Postgres still sends it a result (the events
                # rows) leaves Postgres blocked writing to the socket, active, not idle: no
                # idle bound cuts it, nor statement_timeout. TCP_USER_TIMEOUT does: the
                # kernel of Postgres' host gives the connection up once what it sent stays
                # unread (a zero window, or no ACK from a lost host) that long. A live
                # compare reads on.
                await live.execute(
                    "SELECT set_config('tcp_user_timeout', $1, true)", idle_bound_ms(idle_bound_s)
                )
                opened = last_live = clock()
                async for part in _slices(rebuilt, size):
                    held.longest_idle_s = max(held.longest_idle_s, clock() - last_live)
                    # Both sides at once: the live snapshot is never idle while the rebuild's
                    # rows come (a slice of large events takes seconds to read).
                    ours, theirs = await asyncio.gather(
                        _read_slice(live, part, pause=held.slices == 0),
                        _read_slice(rebuilt, part),
                    )
                    last_live = clock()
                    held.slices += 1
                    held.add(ours, theirs)
                    # Decoded and compared between two live statements: the snapshot sits
                    # idle for this slice's work only, milliseconds.
                    moved_on |= _compare_slice(part, ours, theirs, found)
                async for ours, theirs in _drift_pages(live, rebuilt, size.events):
                    held.add(ours, theirs)
                    found.add("drift", _decoded(ours["drift"]), _decoded(theirs["drift"]))
                held.snapshot_s = clock() - opened
        except (asyncpg.PostgresError, asyncpg.InterfaceError) as error:
            if not live.is_closed():
                raise
            raise AuditError(_snapshot_ended(error, idle_bound_s)) from error
    finally:
        await live.close()
    if moved_on:
        print(
            f"audit compare: {len(moved_on)} transactions moved on after the snapshot; "
            "only their events up to it are compared: "
            + ", ".join(f"{t}/{tx}" for t, tx in sorted(moved_on)),
            file=sys.stderr,
        )
    return differences + found.lines()


# The tables compared by transaction (their rows of the settled transactions only).
_BY_TX_TABLES = ("transactions", "operations", "reviews")

# A slice's rows of one side, as fetched (decoded when compared), by table.
_SliceRows = dict[str, Fetched]


def _rows(side: _SliceRows) -> int:
    return sum(len(rows) for rows, _ in side.values())


async def _slices(rebuilt: asyncpg.Connection, size: SliceSize) -> AsyncIterator[Slice]:
    """The rebuild's transactions in key order, a page of keys at a time, as slices. Its
    database is the rebuild's own (no one else writes it), so no snapshot is needed."""
    page = await rebuilt.fetch(_FIRST_KEYS, size.transactions)
    while page:
        for part in slices_of([(r[0], r[1], r[2]) for r in page], size):
            yield part
        last = page[-1]
        page = await rebuilt.fetch(_NEXT_KEYS, last[0], last[1], size.transactions)


_FIRST_KEYS = "SELECT tenant, tx_id, last_seq FROM transactions ORDER BY tenant, tx_id LIMIT $1"
_NEXT_KEYS = (
    "SELECT tenant, tx_id, last_seq FROM transactions WHERE (tenant, tx_id) > ($1, $2)"
    " ORDER BY tenant, tx_id LIMIT $3"
)

# The events of a slice: each transaction's range of seqs (after NULL: from the first).
_EVENTS = (
    "SELECT t.* FROM events t JOIN unnest($1::text[], $2::text[], $3::int[], $4::int[])"
    " AS s(tenant, tx_id, after_seq, last_seq) ON t.tenant = s.tenant AND t.tx_id = s.tx_id"
    " AND t.seq <= s.last_seq AND (s.after_seq IS NULL OR t.seq > s.after_seq)"
)


async def _read_slice(conn: asyncpg.Connection, part: Slice, pause: bool = False) -> _SliceRows:
    """One side's rows of a slice: statements only, so that on the live side the snapshot
    is idle only between them."""
    rows: _SliceRows = {}
    if part.last_seqs:
        tenants, tx_ids = [k[0] for k in part.last_seqs], [k[1] for k in part.last_seqs]
        for table in _BY_TX_TABLES:
            rows[table] = await _fetch_raw(conn, _BY_TX.format(table=table), tenants, tx_ids)
    await pause_point(AUDIT_COMPARE_IN_SNAPSHOT, when=pause)
    ranges = part.events
    rows["events"] = await _fetch_raw(
        conn,
        _EVENTS,
        [r.tenant for r in ranges],
        [r.tx_id for r in ranges],
        [r.after for r in ranges],
        [r.upto for r in ranges],
    )
    return rows


async def _drift_pages(
    live: asyncpg.Connection, rebuilt: asyncpg.Connection, most_rows: int
) -> AsyncIterator[tuple[_SliceRows, _SliceRows]]:
    """The rebuild's drift reports a page at a time in drift_id order, each beside the
    live database's rows of the same ids (live rows of other ids are newer reports)."""
    theirs = await _fetch_raw(rebuilt, _FIRST_DRIFT, most_rows)
    while theirs[0]:
        ids = [r["drift_id"] for r in theirs[0]]
        ours = await _fetch_raw(live, "SELECT * FROM drift WHERE drift_id = ANY($1::text[])", ids)
        yield {"drift": ours}, {"drift": theirs}
        theirs = await _fetch_raw(rebuilt, _NEXT_DRIFT, ids[-1], most_rows)


_FIRST_DRIFT = "SELECT * FROM drift ORDER BY drift_id LIMIT $1"
_NEXT_DRIFT = "SELECT * FROM drift WHERE drift_id > $1 ORDER BY drift_id LIMIT $2"


def _compare_slice(part: Slice, ours: _SliceRows, theirs: _SliceRows, found: Found) -> set[TxKey]:
    """Adds a slice's differences to `found`; returns its transactions that moved on after
    the snapshot (their live last_seq is past the rebuild's): only their events up to the
    rebuild's seq are compared."""
    moved_on: set[TxKey] = set()
    if part.last_seqs:
        live_seq = {(r["tenant"], r["tx_id"]): r["last_seq"] for r in ours["transactions"][0]}
        moved_on = {k for k, seq in part.last_seqs.items() if live_seq.get(k, 0) > seq}

    def settled(rows: list[Row]) -> list[Row]:
        return [r for r in rows if (r["tenant"], r["tx_id"]) not in moved_on]

    for table in _BY_TX_TABLES:
        if table in ours:
            found.add(table, settled(_decoded(ours[table])), settled(_decoded(theirs[table])))
    found.add("events", _decoded(ours["events"]), _decoded(theirs["events"]))
    return moved_on


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
