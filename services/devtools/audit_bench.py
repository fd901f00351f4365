"""Benchmark of the auditor's paths on a generated log of a million events or more.

`python -m services.devtools.audit_bench` (what `make audit-bench` runs) starts its own
Kafka and Postgres in .cache/audit-bench (or uses --kafka/--database), writes `--events`
hash-chained events of many transactions (services.devtools.synthetic_log: the real
decider's events, with their commands and observations) under a fresh topic prefix, then
times, each as the operator runs it (`python -m services.cli` in a subprocess):

- `audit verify` of the whole log (events/s),
- `audit rebuild` into a fresh database (events/s),
- the compare of `audit rebuild --compare` between that rebuild and a copy of it, in a
  process of its own (services.devtools.audit_compare_cost): rows, seconds, peak RSS,
- `audit timeline --tx` of a few transactions, with the rebuilt projection as the one the
  timeline asks (its fast path), and once with no projection (its fallback).

`--decider` also writes each transaction's finished marker to recon.decider-state, starts
`python -m services.decider` on the prefix and reports how long it takes to restore
every partition and its resident memory once it has. `--history N` adds N more finished
transactions to the changelog only (copies of one generated marker under new ids), for a
decider with that much history without generating its events.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from aiokafka import AIOKafkaProducer

from events.topics import Topics
from services.cli.progress import Progress
from services.devtools.infra._process import REPO_ROOT
from services.devtools.synthetic_log import (
    log_records,
    simulated_start,
    transaction_records,
    tx_coordinates,
)
from services.kafka_setup import ensure_topics

CHUNK = 400  # transactions per task of the generating processes
EVENTS_PER_TX = 8.5  # what synthetic_log writes on average (webhook_every=2)


@dataclass
class Generated:
    transactions: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _chunk(first: int, last: int, start_ms: int) -> list[tuple[str, bytes, bytes, int]]:
    from datetime import UTC, datetime

    start = datetime.fromtimestamp(start_ms / 1000, UTC)
    return [
        (r.role, r.key, r.value, r.timestamp_ms)
        for r in log_records(first, last, start, webhook_every=2)
    ]


async def generate(
    bootstrap: str, topics: Topics, events: int, workers: int, with_markers: bool
) -> Generated:
    """Produce transactions until at least `events` events are on recon.events."""
    await ensure_topics(bootstrap, topics)
    planned = int(events / EVENTS_PER_TX) + CHUNK
    start_ms = int(simulated_start(planned).timestamp() * 1000)
    topic_of = {
        "commands": topics.commands,
        "observations": topics.observations,
        "events": topics.events,
        "decider_state": topics.decider_state,
        "checkpoints": topics.checkpoints,
    }
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=20,
        max_batch_size=1 << 20,
        max_request_size=8 << 20,
        compression_type=None,
    )
    await producer.start()
    out = Generated()
    began = time.monotonic()
    loop = asyncio.get_running_loop()
    try:
        with (
            ProcessPoolExecutor(max_workers=workers) as pool,
            Progress("generate", CHUNK * 25, events, unit="events") as progress,
        ):
            pending: list[Future[list[tuple[str, bytes, bytes, int]]]] = []
            next_tx = 0
            written = 0
            while written < events or pending:
                # Keep every generating process busy, a few chunks ahead of the producer.
                while written < events and len(pending) < workers * 3 and next_tx < planned:
                    pending.append(pool.submit(_chunk, next_tx, next_tx + CHUNK, start_ms))
                    next_tx += CHUNK
                if not pending:
                    break
                records = await asyncio.wrap_future(pending.pop(0), loop=loop)
                acks = []
                for role, key, value, ts in records:
                    if role == "decider_state" and not with_markers:
                        continue
                    acks.append(await producer.send(topic_of[role], value, key, timestamp_ms=ts))
                    out.counts[role] = out.counts.get(role, 0) + 1
                out.transactions += CHUNK
                n = sum(1 for r in records if r[0] == "events")
                written += n
                progress.advance(n)
                if len(acks) > 0:
                    await acks[-1]
        await producer.flush()
    finally:
        await producer.stop()
    out.seconds = time.monotonic() - began
    return out


def _cli(env: dict[str, str], *args: str) -> tuple[float, str, str]:
    """Wall seconds of `python -m services.cli ARGS` (start-up included, as an operator
    waits for it), its stdout and stderr; a failure stops the benchmark."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return seconds, done.stdout, done.stderr


def _compare_cost(database_url: str, rebuilt: str, prefix: str) -> str:
    """The compare of `audit rebuild --compare` between the rebuild and a copy of it (the
    copy as the live side), in a process of its own (services.devtools.audit_compare_cost):
    rows, seconds, peak RSS."""
    name = f"audit_bench_live_{uuid.uuid4().hex[:8]}"
    source = urlsplit(rebuilt).path.lstrip("/")
    live = asyncio.run(_create_database(database_url, name, template=source))
    done = subprocess.run(
        [sys.executable, "-m", "services.devtools.audit_compare_cost", live, rebuilt, prefix],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the compare failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    cost = json.loads(done.stdout)
    return (
        f"{cost['seconds']:.1f} s, {cost['rows']:,} rows of both sides, "
        f"{cost['differences']} differences, peak RSS {cost['peak_rss_mib']:.0f} MiB "
        f"({cost['rss_before_mib']:.0f} MiB resident when it began); {cost['slices']} slices, "
        f"at most {cost['most_rows_held']:,} rows held; live snapshot open "
        f"{cost['snapshot_s']:.1f} s, idle at most {cost['longest_idle_ms']:.0f} ms at once"
    )


def _database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def _create_database(url: str, name: str, template: str | None = None) -> str:
    admin = await asyncpg.connect(url)
    try:
        copy = f' TEMPLATE "{template}"' if template else ""
        await admin.execute(f'CREATE DATABASE "{name}"{copy}')
    finally:
        await admin.close()
    return _database(url, name)


async def write_history(bootstrap: str, topics: Topics, transactions: int) -> float:
    """`transactions` finished markers under new ids on recon.decider-state; seconds."""
    from datetime import UTC, datetime

    from events.keys import partition_key
    from transactions.finished import FinishedTransaction

    [template] = [
        FinishedTransaction.model_validate_json(r.value)
        for r in transaction_records(0, datetime.now(UTC))
        if r.role == "decider_state"
    ]
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=20, max_batch_size=1 << 20
    )
    await producer.start()
    began = time.monotonic()
    try:
        with Progress("history", 50_000, transactions, unit="markers") as progress:
            for i in range(transactions):
                marker = template.model_copy(update={"tx_id": f"history-{i:08d}"})
                key = partition_key(marker.tenant, marker.tx_id)
                await producer.send(topics.decider_state, marker.model_dump_json().encode(), key)
                progress.advance(1)
            await producer.flush()
    finally:
        await producer.stop()
    return time.monotonic() - began


async def skip_inputs(bootstrap: str, topics: Topics) -> None:
    """Commit the decider group's offsets at the end of its input topics: the decider
    started to time its restore must not decide the generated commands and observations
    (it would add events to the log the audit paths were measured on)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"{topics.prefix}recon-decider",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        await consumer._client.set_topics(list(topics.decider_inputs()))
        partitions = [
            TopicPartition(topic, p)
            for topic in topics.decider_inputs()
            for p in consumer.partitions_for_topic(topic) or ()
        ]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        await consumer.commit(dict(ends))
    finally:
        await consumer.stop()


def _decider_restore(env: dict[str, str], partitions: int, timeout_s: float) -> tuple[float, int]:
    """Seconds from the decider's start until it logs `took partition` for every partition,
    and its VmRSS (KiB) then."""
    log_path = REPO_ROOT / ".cache" / "audit-bench" / "decider.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        began = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "services.decider"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        taken: set[str] = set()
        while time.monotonic() - began < timeout_s:
            if process.poll() is not None:
                raise SystemExit(f"the decider exited ({process.returncode}): see {log_path}")
            taken = set(re.findall(r"took partition (\d+)", log_path.read_text()))
            if len(taken) >= partitions:
                seconds = time.monotonic() - began
                status = Path(f"/proc/{process.pid}/status").read_text()
                rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
                return seconds, rss
            time.sleep(0.05)
        raise SystemExit(f"the decider took {sorted(taken)} in {timeout_s} s: see {log_path}")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


@contextmanager
def _own_infra(root: Path, port_offset: int) -> Iterator[tuple[str, str]]:
    from services.devtools.infra.kafka import KafkaBroker
    from services.devtools.infra.postgres import PostgresServer

    shutil.rmtree(root, ignore_errors=True)
    # A heap large enough for a million-record partition's index and page cache pressure.
    kafka = KafkaBroker(root / "kafka", 39092 + port_offset, 39093 + port_offset, heap="1g")
    postgres = PostgresServer(root / "postgres", 35432 + port_offset)
    print(f"starting Kafka and Postgres in {root} ...", file=sys.stderr, flush=True)
    postgres.start()
    try:
        kafka.start()
        try:
            yield kafka.bootstrap, postgres.url
        finally:
            kafka.stop()
    finally:
        postgres.stop()


def run(args: argparse.Namespace, bootstrap: str, database_url: str) -> list[tuple[str, str]]:
    prefix = f"ab{uuid.uuid4().hex[:8]}."
    topics = Topics(prefix)
    print(f"generating {args.events} events under topic prefix {prefix} ...", file=sys.stderr)
    made = asyncio.run(generate(bootstrap, topics, args.events, args.workers, args.decider))
    events = made.counts.get("events", 0)
    rows = [
        (
            "generated",
            f"{made.transactions} tx, {events} events, "
            f"{sum(made.counts.values())} records in {made.seconds:.1f} s "
            f"({events / made.seconds:,.0f} events/s)",
        ),
    ]
    env = {
        **os.environ,
        "RECON_KAFKA_BOOTSTRAP": bootstrap,
        "RECON_DATABASE_URL": database_url,
        "RECON_TOPIC_PREFIX": prefix,
        "RECON_LOG_LEVEL": "INFO",
    }
    seconds, out, _ = _cli(env, "audit", "verify")
    rows.append(
        ("audit verify", f"{seconds:.1f} s, {events / seconds:,.0f} events/s ({out.strip()})")
    )
    into = asyncio.run(_create_database(database_url, f"audit_bench_{uuid.uuid4().hex[:8]}"))
    seconds, out, _ = _cli(env, "audit", "rebuild", "--into", into)
    rows.append(("audit rebuild", f"{seconds:.1f} s, {events / seconds:,.0f} events/s"))
    rows.append(("audit compare", _compare_cost(database_url, into, prefix)))
    # The rebuilt database is a projection of this log: the timeline's fast path asks it.
    projected = {**env, "RECON_DATABASE_URL": into}
    samples = [0, made.transactions // 2, made.transactions - 1]
    for i in samples:
        tenant, tx_id = tx_coordinates(i)
        seconds, out, _ = _cli(projected, "audit", "timeline", "--tx", tx_id)
        rows.append(
            (
                f"timeline {tx_id}",
                f"{seconds * 1000:.0f} ms, {len(out.splitlines())} lines (projection)",
            )
        )
    tenant, tx_id = tx_coordinates(made.transactions // 3)
    unreachable = {
        **env,
        "RECON_DATABASE_URL": _database("postgresql://postgres@127.0.0.1:1/", "x"),
    }
    seconds, out, _ = _cli(unreachable, "audit", "timeline", "--tx", tx_id, "--tenant", tenant)
    rows.append(
        (
            f"timeline {tx_id}",
            f"{seconds * 1000:.0f} ms, {len(out.splitlines())} lines (no projection)",
        )
    )
    if args.decider:
        markers = made.counts.get("decider_state", 0)
        if args.history:
            seconds = asyncio.run(write_history(bootstrap, topics, args.history))
            rows.append(("history", f"{args.history} more markers in {seconds:.1f} s"))
            markers += args.history
        asyncio.run(skip_inputs(bootstrap, topics))
        seconds, rss = _decider_restore(env, 4, args.decider_timeout)
        rows.append(
            (
                "decider restore",
                f"{seconds:.1f} s for {markers} finished transactions,"
                f" VmRSS {rss / 1024:.0f} MiB after",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.devtools.audit_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--events", type=int, default=1_000_000, help="events to generate (1000000)"
    )
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="generating processes"
    )
    parser.add_argument("--decider", action="store_true", help="also time a decider's restore")
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        metavar="N",
        help="with --decider: N more finished transactions on the changelog only (0)",
    )
    parser.add_argument("--decider-timeout", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument(
        "--kafka", metavar="BOOTSTRAP", help="use this Kafka instead of starting one"
    )
    parser.add_argument(
        "--database", metavar="URL", help="use this Postgres instead of starting one"
    )
    parser.add_argument("--port-offset", type=int, default=0, help="added to the own stack's ports")
    args = parser.parse_args(argv)
    if args.kafka and args.database:
        rows = run(args, args.kafka, args.database)
    else:
        root = REPO_ROOT / ".cache" / f"audit-bench{args.port_offset or ''}"
        with _own_infra(root, args.port_offset) as (bootstrap, database_url):
            rows = run(args, bootstrap, database_url)
    width = max(len(name) for name, _ in rows)
    print()
    for name, figure in rows:
        print(f"{name:<{width}}  {figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
