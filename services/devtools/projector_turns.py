"""The live projector's write against a real Postgres, two checkouts taking turns: the
projector's client CPU, its backend's CPU and the statements' cost in Postgres (execution
time, shared blocks, WAL bytes) per recon transaction, for a before/after.

`python -m services.devtools.projector_turns [CHECKOUT ...]` starts a throwaway Postgres
(in .cache/projector_turns<offset>, port 16432 + --port-offset, with pg_stat_statements),
migrates a template database with this checkout's migrations, and runs one worker per
checkout (this file, run with `PYTHONPATH=<checkout>`, so the projections package is the
checkout's), each projecting projector_micro's c30-like stream of README transactions
(`--transactions`, 30 in flight, batches of `--batch` records) through project_batch on
kept views into a database of its own. The workers take turns by chunks of `--chunk`
batches, in alternating order, so that the machine's other work falls on both alike: whole
benchmark stacks on this machine's load could not resolve ~0.1 ms per transaction of the
projector (docs/benchmark.md, proj42), turn-taking chunks could. The first chunk fills the
kept views and is not counted; Postgres's counts are reset after it.

Printed per checkout: client and backend CPU in microseconds per transaction (median of the
chunks; the backend's /proc figure moves in 10 ms steps, so its sum over the run is printed
too), and per statement the calls, plans, planning and execution ms, shared blocks and WAL
bytes per transaction. `--explain` runs the counted write statements under EXPLAIN
(ANALYZE, BUFFERS, WAL) and prints those figures by WITH query (a query read by another is
counted in both; EXPLAIN's timing inflates every CPU figure). `--set` gives every worker's
connection a session setting, `--sql` runs statements on every side's database first (a
dropped index, say: blocks and WAL per transaction hardly depend on the load, so two runs
compare).

It calls only what main has had since the projector wrote one statement per batch, so an
older checkout runs too, on this checkout's schema (migrations keep the previous release
working).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TOPIC = "recon.events"
PARTITIONS = 64


def _backend_cpu_s(pid: int) -> float:
    # utime + stime of the connection's backend (fields 14 and 15 of /proc/<pid>/stat).
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# EXPLAIN's figures of a node, summed, and how they are printed.
_FIGURES = {
    "Shared Hit Blocks": "blocks",
    "Shared Read Blocks": "blocks",
    "WAL Bytes": "WAL bytes",
    "WAL Records": "WAL records",
}


class _Explained:
    """The worker's connection, with the batch's write statement (the projector's one
    `WITH held AS ...`) run under EXPLAIN ANALYZE while `on`: it still writes, and its
    figures are summed by the statement's WITH queries. Its answer (whether the offsets
    held) is taken as yes: the worker is its database's one writer."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.on = False
        self.sums: dict[str, dict[str, float]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        if not (self.on and sql.startswith("WITH held AS")):
            return await self._conn.fetchval(sql, *args)
        explain = "EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) "
        plan = json.loads(await self._conn.fetchval(explain + sql, *args))[0]
        total = self.sums.setdefault("execution", {})
        total["ms"] = total.get("ms", 0.0) + plan["Execution Time"]
        for node in plan["Plan"].get("Plans", []):
            name = node.get("Subplan Name", "")
            if name.startswith("CTE "):
                sums = self.sums.setdefault(name.removeprefix("CTE "), {})
                sums["ms"] = sums.get("ms", 0.0) + node["Actual Total Time"]
                for figure, shown in _FIGURES.items():
                    sums[shown] = sums.get(shown, 0.0) + node.get(figure, 0)
        return True


async def _worker(args: argparse.Namespace) -> None:
    """Project the stream into `args.worker`, a chunk of batches per line on stdin; print
    each chunk's client CPU s, backend CPU s and transactions' worth of events, and at the
    end (stdin closed) the EXPLAIN sums as JSON."""
    import asyncpg

    from projections.decode import decode_event
    from projections.view_cache import ViewCache
    from projections.writer import project_batch
    from services.devtools.projector_micro import stream

    try:  # the checkout's projector's collector settings (projector_micro says why)
        from services.devtools.projector_micro import collect_as_the_projector
    except ImportError:  # a checkout from before them: its projector kept CPython's
        pass
    else:
        collect_as_the_projector()
    conn = _Explained(await asyncpg.connect(args.worker))
    await conn.execute(
        "INSERT INTO projection_offsets (topic, partition, next_offset)"
        " SELECT $1, p, 0 FROM generate_series(0, $2 - 1) p ON CONFLICT DO NOTHING",
        TOPIC,
        PARTITIONS,
    )
    for setting in args.set:
        name, _, value = setting.partition("=")
        await conn.execute("SELECT set_config($1, $2, false)", name, value)
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    events = stream(args.transactions, 30)
    per_tx = len(events) / args.transactions
    cache = ViewCache()
    offsets = {p: 0 for p, _ in events}
    cache.committed(dict(offsets), {})
    batches = [events[i : i + args.batch] for i in range(0, len(events), args.batch)]
    print("ready", (len(batches) + args.chunk - 1) // args.chunk, flush=True)
    at = 0
    for _ in sys.stdin:
        client, backend, done = time.process_time(), _backend_cpu_s(pid), 0
        for records in batches[at : at + args.chunk]:
            written, decoded = [], []
            for partition, value in records:
                result = decode_event(value)
                assert not isinstance(result, str), result
                written.append((partition, offsets[partition], result[0]))
                decoded.append(result[1])
                offsets[partition] += 1
                done += 1
            await project_batch(conn, TOPIC, written, events=decoded, cache=cache)
        at += args.chunk
        conn.on = args.explain  # the first chunk fills the kept views, uncounted
        print(
            time.process_time() - client,
            _backend_cpu_s(pid) - backend,
            done / per_tx,
            flush=True,
        )
    print(json.dumps(conn.sums), flush=True)
    await conn.close()


def _spawn(checkout: Path, url: str, args: argparse.Namespace) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    worker = [sys.executable, __file__, "--worker", url]
    worker += [f"--transactions={args.transactions}", f"--batch={args.batch}"]
    worker += [f"--chunk={args.chunk}", *[f"--set={s}" for s in args.set]]
    worker += ["--explain"] if args.explain else []
    return subprocess.Popen(
        worker, cwd=checkout, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _turn(worker: subprocess.Popen[str]) -> tuple[float, float, float]:
    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write("go\n")
    worker.stdin.flush()
    client, backend, transactions = map(float, worker.stdout.readline().split())
    return client, backend, transactions


def _finish(worker: subprocess.Popen[str]) -> dict[str, dict[str, float]]:
    """Close the worker's turns: its EXPLAIN sums (empty without --explain)."""
    assert worker.stdin is not None and worker.stdout is not None
    if worker.stdin.closed:
        return {}
    worker.stdin.close()
    last = worker.stdout.readline()
    worker.wait(timeout=60)
    return json.loads(last) if last else {}


async def _sql(url: str, *statements: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="*", type=Path, help="default: this checkout")
    parser.add_argument("--transactions", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--chunk", type=int, default=20, help="batches per turn")
    parser.add_argument("--port-offset", type=int, default=0)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a session setting of every worker's connection (e.g. enable_seqscan=off)",
    )
    parser.add_argument(
        "--sql",
        action="append",
        default=[],
        metavar="STATEMENT",
        help="run on every side's database before the turns (e.g. DROP INDEX operations_op_key:"
        " blocks and WAL per transaction do not depend on the load, so two runs compare)",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="run the counted write statements under EXPLAIN (ANALYZE, BUFFERS, WAL) and"
        " print their figures by WITH query (its timing inflates the CPU figures)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(_worker(args))
        return

    from services.devtools import pg_counts, pg_server_cost
    from services.devtools.infra.postgres import PostgresServer
    from services.migrate import migrate

    here = Path(__file__).resolve().parents[2]
    checkouts = [c.resolve() for c in args.checkouts] or [here]
    root = here / ".cache" / f"projector_turns{args.port_offset or ''}"
    shutil.rmtree(root, ignore_errors=True)
    postgres = PostgresServer(root, 16432 + args.port_offset, settings=pg_counts.PRELOAD)
    postgres.start()
    workers: list[subprocess.Popen[str]] = []
    try:
        migrate(postgres.url, say=lambda _: None)
        # A database per side (both write the same transactions), each side connecting as
        # a role of its own, which names it in pg_server_cost's statements.
        names = [f"side{i}" for i in range(len(checkouts))]
        asyncio.run(pg_counts.prepare(postgres.url, names))
        asyncio.run(_sql(postgres.url, *[f"CREATE DATABASE {n} TEMPLATE postgres" for n in names]))
        host = f"127.0.0.1:{postgres.port}"
        urls = [f"postgresql://{pg_counts.role(n)}@{host}/{n}" for n in names]
        for url in urls:
            asyncio.run(_sql(url, *args.sql))
        workers = [_spawn(c, url, args) for c, url in zip(checkouts, urls, strict=True)]
        chunks = []
        for worker in workers:
            assert worker.stdout is not None
            chunks.append(int(worker.stdout.readline().split()[1]))
        for worker in workers:
            _turn(worker)  # fills the kept views
        asyncio.run(_sql(postgres.url, f"SELECT {pg_counts.SCHEMA}.pg_stat_statements_reset()"))
        turns: list[list[tuple[float, float, float]]] = [[] for _ in workers]
        for i in range(1, min(chunks)):
            order = range(len(workers)) if i % 2 else reversed(range(len(workers)))
            for w in order:
                turns[w].append(_turn(workers[w]))
        explained = [_finish(worker) for worker in workers]
        for checkout, name, taken, sums in zip(checkouts, names, turns, explained, strict=True):
            transactions = sum(t for _, _, t in taken)
            client = [c / t * 1e6 for c, _, t in taken]
            backend = [b / t * 1e6 for _, b, t in taken]
            print(
                f"{name} = {checkout}: {len(taken)} chunks, {transactions:.0f} transactions;"
                f" client {statistics.median(client):.0f} us/tx (median;"
                f" mean {statistics.mean(client):.0f}), backend median"
                f" {statistics.median(backend):.0f}, all"
                f" {sum(b for _, b, _ in taken) / transactions * 1e6:.0f} us/tx"
            )
            for query, figures in sums.items():
                print(
                    f"    EXPLAINed {query:<22}"
                    + "".join(f" {v / transactions:8.3f} {k}" for k, v in figures.items())
                )
        # The sides project the same stream in the same chunks: the same transactions.
        counted = round(sum(t for _, _, t in turns[0]))
        print(asyncio.run(pg_server_cost.by_time(postgres.url, counted, top=2 * len(names))))
    finally:
        for worker in workers:
            _finish(worker)
        postgres.stop()


if __name__ == "__main__":
    main()
