"""What finding a step by its approval id costs as the tenant's history grows: the read
behind POST /v1/approvals/{key}/reject given an `ap_...` id (services.intake.tenant_store.
TenantStore.step, its APPROVED_STEP), with and without the index of migration 0015.

`python -m services.devtools.approval_lookup_cost` starts its own Postgres in
.cache/approval_lookup_cost<offset> (port 15432 plus `--port-offset`) at the code's schema
version; the lookup reads Postgres alone, so no Kafka or recon process runs. For each N of
`--sizes` a tenant of its own (`n<N>`) gets N events: transactions whose charge ran on an
operator's approval, built by the real decider (services.devtools.approved_log: eight
events each, one an OperationApproved: a tenant whose every transaction waited for a
person, the most rows the index gets from an ordinary history) and written by the
projector's own statement (projections.writer.project_batch, in audit rebuild's bulk
mode). Then ANALYZE.

In `--rounds` rounds, the sizes and the two sides taking turns in alternating order so the
machine's other work falls on each alike, each side asks `--lookups` approval ids of the
tenant picked at random (`found`) and as many that no approval has (`unknown`, the 404
an operator's typo or a guessed id gets: the most a lookup reads). A side runs in a
transaction that is rolled back: `without` drops the index in it first (the schema before
0015, restored by the rollback), `with` drops nothing. Printed per N, side and kind: the
median wall ms of TenantStore.step (the route's whole read: the op-key lookup first), and
from EXPLAIN (ANALYZE, BUFFERS) of APPROVED_STEP with the same arguments, the median
execution ms, the rows of `events` read (returned plus removed by a filter) and the
shared buffers touched (hit + read; read: not in Postgres's cache). Last, with
`--build`, how long migration 0015's concurrent build takes on the filled table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from services.devtools.approved_log import approval_of, approved_transaction
from services.devtools.infra import PostgresServer
from services.devtools.infra._process import REPO_ROOT
from services.intake.tenant_store import APPROVED_STEP, TenantStore

INDEX = "events_approval_id"
EVENTS_PER_TX = 8
SIDES = ("with", "without")
KINDS = ("found", "unknown")


@dataclass(frozen=True)
class Explained:
    """What EXPLAIN (ANALYZE, BUFFERS) says APPROVED_STEP read for one approval id."""

    exec_ms: float
    rows: int  # of `events`, returned or removed by a filter
    buffers: int  # shared, hit or read
    read: int  # shared, not in Postgres's cache
    plan: str  # the plan, as JSON


@dataclass(frozen=True)
class Lookup:
    wall_ms: float  # TenantStore.step's, the route's whole read
    explained: Explained


async def fill(
    conn: asyncpg.Connection, tenant: str, transactions: range, offset: int
) -> list[str]:
    """Approved transactions `transactions` of `tenant` (EVENTS_PER_TX events each), at
    offsets of partition 0 from `offset` on (the projector skips those it wrote already);
    their approval ids, oldest first."""
    from projections.writer import project_batch

    start = datetime.now(UTC) - timedelta(days=30)
    approvals: list[str] = []
    for first in range(transactions.start, transactions.stop, 1000):
        records = []
        for i in range(first, min(first + 1000, transactions.stop)):
            envelopes = approved_transaction(tenant, f"tx-{i:08d}", start + timedelta(seconds=i))
            approvals.append(approval_of(envelopes))
            for envelope in envelopes:
                records.append((0, offset, envelope))
                offset += 1
        await project_batch(conn, "recon.events", records, bulk=True)
    return approvals


def _events_rows(node: dict[str, Any]) -> int:
    # EXPLAIN shows a node's rows, and those its filter removed, per loop: an inner scan
    # of a nested loop runs once per outer row.
    rows = 0
    if node.get("Relation Name") == "events":
        read = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        rows += int(read * node.get("Actual Loops", 1))
    return rows + sum(_events_rows(child) for child in node.get("Plans", []))


async def explain(conn: asyncpg.Connection, tenant: str, key: str) -> Explained:
    """APPROVED_STEP run for `key` in `tenant` under EXPLAIN (ANALYZE, BUFFERS)."""
    answer = await conn.fetchval(
        f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {APPROVED_STEP}", tenant, key
    )
    plan = json.loads(answer)[0]
    top = plan["Plan"]
    return Explained(
        exec_ms=plan["Execution Time"],
        rows=_events_rows(top),
        buffers=top["Shared Hit Blocks"] + top["Shared Read Blocks"],
        read=top["Shared Read Blocks"],
        plan=json.dumps(top),
    )


async def _lookup(conn: asyncpg.Connection, tenant: str, key: str, found: bool) -> Lookup:
    began = time.perf_counter()
    row = await TenantStore(conn, tenant).step(key)
    wall = (time.perf_counter() - began) * 1000
    assert (row is not None) == found, (tenant, key, row)
    return Lookup(wall, await explain(conn, tenant, key))


async def _side(
    conn: asyncpg.Connection, side: str, tenant: str, found: list[str], unknown: list[str]
) -> dict[str, list[Lookup]]:
    transaction = conn.transaction()
    await transaction.start()
    try:
        if side == "without":
            await conn.execute(f"DROP INDEX {INDEX}")
        return {
            "found": [await _lookup(conn, tenant, k, True) for k in found],
            "unknown": [await _lookup(conn, tenant, k, False) for k in unknown],
        }
    finally:
        await transaction.rollback()


def _table(results: dict[tuple[int, str, str], list[Lookup]], sizes: list[int]) -> str:
    lines = [
        "N        side     kind     step() wall ms  exec ms   events rows read"
        "  buffers (read)   [median of the lookups]"
    ]
    for n in sizes:
        for side in SIDES:
            for kind in KINDS:
                got = results[(n, side, kind)]
                lines.append(
                    f"{n:<8} {side:<8} {kind:<8}"
                    f" {statistics.median(x.wall_ms for x in got):>14.2f}"
                    f" {statistics.median(x.explained.exec_ms for x in got):>8.2f}"
                    f" {statistics.median(x.explained.rows for x in got):>18.0f}"
                    f" {statistics.median(x.explained.buffers for x in got):>9.0f}"
                    f" ({statistics.median(x.explained.read for x in got):.0f})"
                )
    return "\n".join(lines)


async def _measure(url: str, args: argparse.Namespace) -> None:
    conn = await asyncpg.connect(url)
    try:
        approvals: dict[int, list[str]] = {}
        offset = 0
        for n in args.sizes:
            began = time.monotonic()
            transactions = range(-(-n // EVENTS_PER_TX))  # whole ones: at least n events
            approvals[n] = await fill(conn, f"n{n}", transactions, offset)
            offset += len(transactions) * EVENTS_PER_TX
            print(f"filled tenant n{n}: {n} events in {time.monotonic() - began:.0f} s", flush=True)
        await conn.execute("ANALYZE events")
        await conn.execute("ANALYZE operations")
        sizes = await conn.fetchrow(
            "SELECT pg_size_pretty(pg_table_size('events')) AS events,"
            f" pg_size_pretty(pg_relation_size('{INDEX}')) AS approvals,"
            " pg_size_pretty(pg_relation_size('events_pkey')) AS pkey"
        )
        print(
            f"events: {sizes['events']}, its primary key {sizes['pkey']},"
            f" {INDEX} {sizes['approvals']}",
            flush=True,
        )
        pick = random.Random(args.seed)
        results: dict[tuple[int, str, str], list[Lookup]] = defaultdict(list)
        for r in range(args.rounds):
            turns = [(n, side) for n in args.sizes for side in SIDES]
            for n, side in turns if r % 2 == 0 else turns[::-1]:
                found = pick.sample(approvals[n], min(args.lookups, len(approvals[n])))
                unknown = [f"ap_{pick.getrandbits(128):032x}" for _ in range(args.lookups)]
                got = await _side(conn, side, f"n{n}", found, unknown)
                for kind, lookups in got.items():
                    results[(n, side, kind)] += lookups
            print(f"round {r} done", flush=True)
        print(_table(results, args.sizes))
    finally:
        await conn.close()


def _build(url: str) -> None:
    """Migration 0015's build on the filled table, timed: its own definition, as
    Postgres holds it, dropped and built by services.concurrent_index as the migration
    does."""
    import psycopg

    from services import concurrent_index

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_get_indexdef(%s::regclass)", (INDEX,)).fetchone()
        assert row is not None
        definition = "ON " + str(row[0]).split(" ON ", 1)[1]
        concurrent_index.drop(conn, INDEX)
        began = time.monotonic()
        concurrent_index.build(conn, INDEX, definition)
        print(f"{INDEX} built concurrently in {time.monotonic() - began:.1f} s: {definition}")


def main() -> None:
    from services.migrate import migrate

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000, 1_000_000])
    parser.add_argument("--lookups", type=int, default=5, help="per size, side, kind and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=55)
    parser.add_argument("--build", action="store_true", help="time the index's build too")
    parser.add_argument("--port-offset", type=int, default=0)
    args = parser.parse_args()
    root = REPO_ROOT / ".cache" / f"approval_lookup_cost{args.port_offset or ''}"
    shutil.rmtree(root, ignore_errors=True)
    postgres = PostgresServer(root / "postgres", 15432 + args.port_offset)
    print(f"starting Postgres in {root} ...", flush=True)
    postgres.start()
    try:
        migrate(postgres.url, say=lambda _: None)
        asyncio.run(_measure(postgres.url, args))
        if args.build:
            _build(postgres.url)
    finally:
        postgres.stop()


if __name__ == "__main__":
    main()
