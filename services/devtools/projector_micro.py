"""Micro-benchmark of the live projector's Python per event: decode, the kept views, the
fold, the rows and the write statement's parameters, with Postgres answered by a stub.

`python -m services.devtools.projector_micro` projects README transactions' events
(services.devtools.synthetic_log: reserve, charge, a receipt on commit, a webhook's evidence
now and then) through projections.writer.project_batch on its kept-views path, the way a
c30 stream arrives: `--in-flight` transactions at once, one event each in turn, on recon's
partitions, in batches of `--batch` records. The first half of the events fills the kept
views (a benchmark's warm-up); the second half is timed, in the process's CPU time, the
best of `--rounds` rounds (the one least disturbed by the machine's other work), and
printed in microseconds per event.

It calls only what main has had since the projector kept views, so the same file runs
against another checkout for a before/after (`PYTHONPATH=<checkout> python <this file>`);
compare in alternation (docs/benchmark.md, "Where the projector's CPU goes").
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from projections.decode import decode_event
from projections.table_writes import TABLES
from projections.view_cache import ViewCache
from projections.writer import project_batch
from services.devtools.synthetic_log import partition_of, simulated_start, transaction_records


class _Stub:
    """Postgres as the kept-views path asks it: the columns' types, once, then the one
    write statement, which answers that it wrote."""

    async def fetch(self, _sql: str, names: list[str]) -> list[dict[str, str]]:
        return [
            {"table": t, "attname": c, "type": "text"} for t in names for c in TABLES[t].columns
        ]

    async def fetchval(self, *_args: Any) -> bool:
        return True


def stream(transactions: int, in_flight: int) -> list[tuple[int, bytes]]:
    """(partition, value) of every event, `in_flight` transactions interleaved."""
    start = simulated_start(transactions)
    logs = [
        [
            (partition_of(r.key), r.value)
            for r in transaction_records(i, start)
            if r.role == "events"
        ]
        for i in range(transactions)
    ]
    out: list[tuple[int, bytes]] = []
    live: list[list[int]] = []
    following = 0
    while live or following < len(logs):
        while len(live) < in_flight and following < len(logs):
            live.append([following, 0])
            following += 1
        for item in list(live):
            out.append(logs[item[0]][item[1]])
            item[1] += 1
            if item[1] == len(logs[item[0]]):
                live.remove(item)
    return out


async def _project(events: list[tuple[int, bytes]], batch: int, timed_from: int) -> float:
    cache, conn = ViewCache(), _Stub()
    offsets: dict[int, int] = {p: 0 for p, _ in events}
    cache.committed(dict(offsets), {})
    began = 0.0
    for first in range(0, len(events), batch):
        if first == timed_from:
            began = time.process_time()
        records, decoded = [], []
        for partition, value in events[first : first + batch]:
            result = decode_event(value)
            assert not isinstance(result, str), result
            records.append((partition, offsets[partition], result[0]))
            decoded.append(result[1])
            offsets[partition] += 1
        await project_batch(conn, "recon.events", records, events=decoded, cache=cache)
    return time.process_time() - began


def collect_as_the_projector() -> None:
    """The checkout's projector's collector settings (`python -m services.projector` tunes
    them: proj44 measured the collector at 13-24 % of its CPU untuned), so that a figure here
    is the projector's; an older checkout without services.collector keeps CPython's, as its
    projector did. Call after the imports, before the work."""
    try:
        from services.collector import tune_for_service
    except ImportError:
        return
    tune_for_service()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=1200)
    parser.add_argument("--in-flight", type=int, default=30)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    events = stream(args.transactions, args.in_flight)
    collect_as_the_projector()
    half = len(events) // 2 // args.batch * args.batch
    spent = [asyncio.run(_project(events, args.batch, half)) for _ in range(args.rounds)]
    timed = len(events) - half
    print(
        f"{args.transactions} transactions, {len(events)} events, {args.in_flight} in flight, "
        f"batches of {args.batch}: {min(spent) / timed * 1e6:.1f} us per event "
        f"(best of {args.rounds}; all {', '.join(f'{s / timed * 1e6:.1f}' for s in spent)})"
    )


if __name__ == "__main__":
    main()
