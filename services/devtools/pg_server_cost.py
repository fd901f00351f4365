"""Where the benchmark's Postgres spends its CPU and writes its WAL, per transaction: what
services.devtools.bench prints beside the statement counts (services.devtools.pg_counts).

- CPU by server process, from /proc: a client backend by the role it serves (each recon
  service connects as `bench_<service>`), the others by their kind (walwriter,
  checkpointer, autovacuum, io workers...). A process that exited during the run (an
  autovacuum worker) is counted in the postmaster's reaped children: "exited".
- WAL: bytes, records and full-page images the server wrote over the run
  (`pg_current_wal_insert_lsn`, `pg_stat_wal`).
- Planner statistics: gathered after the warm-up (`analyze`), as autovacuum would have.
- By statement, the most expensive by Postgres's own execution time, with their calls, rows,
  shared buffers hit and dirtied and WAL bytes (pg_stat_statements), each per transaction.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import asyncpg

from services.devtools.cpu_account import TICK, _stat
from services.devtools.pg_counts import ROLE_PREFIX, SCHEMA, _one_line

# Background processes by the start of their title ("postgres: <title>").
_KINDS = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum launcher",
    "autovacuum worker",
    "io worker",
    "logical replication launcher",
    "walsummarizer",
)


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return raw.removeprefix("postgres:").strip()


def _kind(title: str) -> str:
    first = title.split(" ", 1)[0]
    if first.startswith(ROLE_PREFIX):
        return first.removeprefix(ROLE_PREFIX)
    for kind in _KINDS:
        if title.startswith(kind):
            return kind
    return "other backends"


def _kernel_s(pid: int) -> float:
    """System (kernel) CPU seconds of the process itself: a commit's WAL write and fdatasync."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return 0.0
    return int(raw[raw.rfind(")") + 2 :].split()[12]) / TICK


def processes_cpu(postmaster: int) -> dict[str, float]:
    """CPU seconds so far of the server's processes, by kind (module docstring), and of each
    kind's the part spent in the kernel ("<kind>: of which kernel")."""
    cpu: dict[str, float] = {}
    own = _stat(postmaster)
    if own is None:
        return cpu
    cpu["postmaster"] = own[1]
    cpu["exited"] = own[2]
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _stat(int(name))
        if stat is None or stat[0] != postmaster:
            continue
        kind = _kind(_title(int(name)))
        cpu[kind] = cpu.get(kind, 0.0) + stat[1] + stat[2]
        kernel = f"{kind}: of which kernel"
        cpu[kernel] = cpu.get(kernel, 0.0) + _kernel_s(int(name))
    return cpu


async def analyze(database_url: str) -> None:
    """Planner statistics for every table, as autovacuum keeps them in a live system (it
    analyses a table once a tenth of it changed). Run after the warm-up: autovacuum's first
    round comes a minute after the server starts, after most of a benchmark, and until then
    a statement plans on the sizes it saw first. A service's cached generic plan, made while
    the tables were nearly empty, then goes on scanning whole tables as they grow (a webhook
    batch read every `operations` row: ~400 shared blocks per transaction, growing with the
    run). ANALYZE invalidates those plans, as autovacuum's would."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


@dataclass(frozen=True)
class Wal:
    position: int  # bytes since 0/0
    records: int
    fpi: int


async def wal(database_url: str) -> Wal:
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint AS position,"
            " wal_records, wal_fpi FROM pg_stat_wal"
        )
    finally:
        await conn.close()
    assert row is not None
    return Wal(int(row["position"]), int(row["wal_records"]), int(row["wal_fpi"]))


def table(
    before: dict[str, float],
    after: dict[str, float],
    wal_before: Wal,
    wal_after: Wal,
    transactions: int,
) -> str:
    spent = {k: after[k] - before.get(k, 0.0) for k in after}
    total = sum(v for k, v in spent.items() if ": of which" not in k)
    lines = [
        f"Postgres server CPU by process: {total * 1000 / transactions:.2f} ms per transaction",
        f"{'process':<30} {'CPU s':>7} {'ms/tx':>7}",
    ]
    for kind, seconds in sorted(spent.items(), key=lambda kv: (-spent[kv[0].split(":")[0]], kv[0])):
        if seconds > 0:
            lines.append(f"{kind:<30} {seconds:7.2f} {seconds * 1000 / transactions:7.2f}")
    records = wal_after.records - wal_before.records
    lines.append(
        f"WAL: {(wal_after.position - wal_before.position) / transactions:.0f} bytes,"
        f" {records / transactions:.1f} records,"
        f" {(wal_after.fpi - wal_before.fpi) / transactions:.2f} full-page images per transaction"
    )
    return "\n".join(lines)


async def by_time(database_url: str, transactions: int, top: int = 12, width: int = 90) -> str:
    """The `top` statements by execution time (pg_stat_statements), per transaction."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            f"SELECT r.rolname, s.query, s.calls, s.total_exec_time, s.rows, s.plans,"
            f" s.total_plan_time,"
            f" s.shared_blks_hit + s.shared_blks_read AS blocks, s.shared_blks_dirtied,"
            f" s.wal_bytes FROM {SCHEMA}.pg_stat_statements s"
            " JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname LIKE $1"
            " ORDER BY s.total_exec_time + s.total_plan_time DESC LIMIT $2",
            ROLE_PREFIX + "%",
            top,
        )
    finally:
        await conn.close()
    n = transactions
    lines = [
        f"\nby statement (the {top} longest in planning and execution; per tx: calls, plans,"
        " plan ms, exec ms, rows, shared blocks, dirtied, WAL bytes; process, statement):"
    ]
    for r in rows:
        query = _one_line(r["query"])
        text = query if len(query) <= width else query[: width - 3] + "..."
        lines.append(
            f"{r['calls'] / n:6.2f} {r['plans'] / n:6.2f} {r['total_plan_time'] / n:7.3f}"
            f" {r['total_exec_time'] / n:7.3f} {r['rows'] / n:6.1f}"
            f" {r['blocks'] / n:7.1f} {r['shared_blks_dirtied'] / n:6.2f}"
            f" {float(r['wal_bytes']) / n:7.0f} {r['rolname'].removeprefix(ROLE_PREFIX):<10}"
            f" {text}"
        )
    return "\n".join(lines)
