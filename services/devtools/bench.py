"""Benchmark: N transactions through the whole system, accept-to-commit latency.

`python -m services.devtools.bench` (what `make bench` runs) starts its own Kafka, Postgres,
sandbox and recon services in .cache/bench, unless --url points it at a running
recon (such as `make run`'s). Each transaction is the README's: reserve, charge, and
an email on commit. Latency runs from the intake's 202 to the moment a read_committed
consumer of recon.events receives the transaction's TransactionCommitted event: the
commit as the log records it, without polling the API (which would load the very
system being measured).

With its own stack it also prints the CPU seconds each process used over the measured run,
per transaction (services.devtools.cpu_account), after `--warmup` transactions that are not
measured; `--profile SERVICE` writes a cProfile of that service over the measured run
(services.profiling) and prints its top functions. It prints T, the decider's Kafka
transactions per transaction, inputs per decider transaction, and the projector's batches
and Postgres statements per transaction (counts: less load-dependent than CPU);
`--requests` also counts the broker's requests by kind per transaction, from Kafka's request
log (which costs the broker CPU: read CPU from a run without it). It prints Postgres
statements per transaction by process and by statement (services.devtools.pg_counts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import shutil
import signal
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition

from events.event_type_header import event_type_of
from events.topics import PARTITIONS, Topics
from services.cli.progress import Progress
from services.devtools import pg_counts
from services.devtools.consumer_groups import wait_spread
from services.devtools.cpu_account import CpuUse, snapshot
from services.devtools.hops import hop_table, read_hops
from services.devtools.infra._process import REPO_ROOT
from services.devtools.kafka_counts import (
    decider_counts,
    decider_table,
    request_counts,
    request_offset,
    request_table,
)
from services.devtools.projector_counts import projector_counts, projector_table
from services.devtools.stack import SERVICES, Stack
from services.intake.example import example_transaction

# The events that end a transaction for the benchmark.
WATCHED = frozenset({"TransactionCommitted", "TransactionFailed", "TransactionNeedsReview"})


class CommitWatcher:
    """Resolves a future per transaction when its TransactionCommitted is readable.

    One consumer per partition: aiokafka leaves a partition whose records were just handed
    out of the next fetch, and one connection serves one fetch at a time, so with a single
    consumer the commit of a transaction whose earlier events were read moments before
    would wait for another partition's long poll (fetch_max_wait_ms) to end. Alone on its
    connection, a partition is fetched again as soon as its records are taken."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.bootstrap = bootstrap
        self.topic = topics.events
        self.waiting: dict[str, asyncio.Future[float]] = {}
        self.consumers: list[AIOKafkaConsumer] = []
        self.tasks: list[asyncio.Task[None]] = []

    def _consumer(self, *topics: str) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            *topics,
            bootstrap_servers=self.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
        )

    async def __aenter__(self) -> CommitWatcher:
        probe = self._consumer(self.topic)  # subscribed: its metadata covers the topic
        await probe.start()
        try:
            partitions = probe.partitions_for_topic(self.topic)
        finally:
            await probe.stop()
        if not partitions:
            raise RuntimeError(f"no partitions found for {self.topic}")
        for partition in sorted(partitions):
            consumer = self._consumer()
            await consumer.start()
            tp = TopicPartition(self.topic, partition)
            consumer.assign([tp])
            await consumer.seek_to_end(tp)
            self.consumers.append(consumer)
            self.tasks.append(asyncio.create_task(self._watch(consumer)))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self.tasks:
            task.cancel()
        for consumer in self.consumers:
            await consumer.stop()

    def expect(self, tx_id: str) -> asyncio.Future[float]:
        self.waiting[tx_id] = asyncio.get_running_loop().create_future()
        return self.waiting[tx_id]

    async def _watch(self, consumer: AIOKafkaConsumer) -> None:
        async for record in consumer:
            named = event_type_of(record.headers)
            if named is not None and named not in WATCHED:
                continue  # the client's CPU is the box's too: pass over by the type header
            envelope = json.loads(record.value)
            future = self.waiting.get(envelope["tx_id"])
            if future is None or future.done():
                continue
            if envelope["type"] == "TransactionCommitted":
                future.set_result(time.perf_counter())
            elif envelope["type"] in ("TransactionFailed", "TransactionNeedsReview"):
                future.set_exception(RuntimeError(f"{envelope['tx_id']}: {envelope['type']}"))


KEEPALIVE_EXPIRY_S = 5.0
SUBMIT_ATTEMPTS = 5


async def submit(
    client: httpx.AsyncClient, url: str, tx_id: str, headers: dict[str, str], retries: list[str]
) -> None:
    """POST the intent until it is accepted. Resending is safe: the same tx_id with the
    same body is the same intent (202 again, nothing new). A 503 asks for exactly that; a
    dropped connection leaves the outcome unknown, which a resend settles. Every retry is
    counted and reported, so a benchmark that needed them says so."""
    body = example_transaction(tx_id)
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        try:
            response = await client.post(url, json=body, headers=headers)
        except httpx.TransportError as error:
            if attempt == SUBMIT_ATTEMPTS:
                raise
            retries.append(f"{tx_id}: {error!r}")
        else:
            if response.status_code == 202:
                return
            if response.status_code != 503 or attempt == SUBMIT_ATTEMPTS:
                raise RuntimeError(
                    f"{tx_id}: intake answered {response.status_code}: {response.text}"
                )
            retries.append(f"{tx_id}: 503 {response.text}")
        await asyncio.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


async def drive(
    url: str,
    api_key: str,
    bootstrap: str,
    topics: Topics,
    count: int,
    concurrency: int,
    prefix: str = "bench",
) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {api_key}"}
    run = uuid.uuid4().hex[:8]
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    retries: list[str] = []
    # Idle connections are dropped by the client before the intake's keep-alive timeout
    # (services.intake.__main__.KEEP_ALIVE_S) can close them under a request.
    limits = httpx.Limits(max_connections=concurrency * 2, keepalive_expiry=KEEPALIVE_EXPIRY_S)

    async with (
        httpx.AsyncClient(timeout=30, limits=limits) as client,
        CommitWatcher(bootstrap, topics) as watcher,
    ):

        async def one(i: int) -> None:
            tx_id = f"{prefix}-{run}-{i}"
            async with gate:
                committed = watcher.expect(tx_id)
                await submit(client, f"{url}/v1/transactions", tx_id, headers, retries)
                accepted = time.perf_counter()
                latencies.append(await asyncio.wait_for(committed, 120) - accepted)
                progress.advance()

        # A live bar on a terminal, else a line every tenth (services.cli.progress).
        progress = Progress("bench", max(1, count // 10), count, unit="transactions committed")
        started = time.perf_counter()
        with progress:
            await asyncio.gather(*(one(i) for i in range(count)))
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "transactions": count,
        "retries": len(retries),
        "concurrency": concurrency,
        "seconds": elapsed,
        "throughput_tx_per_s": count / elapsed,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "max_ms": ordered[-1] * 1000,
    }


async def settled(deciders: list[str], quiet_s: float = 1.0, limit_s: float = 15.0) -> Counter[str]:
    """The deciders' counts once their committed inputs stopped moving for `quiet_s`."""
    last = decider_counts(deciders)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet_s)
        now = decider_counts(deciders)
        if now["inputs"] == last["inputs"]:
            return now
        last = now
    return last


PROFILED = tuple(s for s in SERVICES if s != "sandbox")
# Each connects to Postgres as a role of its own, which names it in pg_stat_statements.
RECON_SERVICES = PROFILED


async def _with_own_stack(args: argparse.Namespace) -> dict[str, float]:
    from services.devtools.infra.kafka import KafkaBroker
    from services.devtools.infra.postgres import PostgresServer

    root: Path = REPO_ROOT / ".cache" / f"bench{args.port_offset or ''}"
    at = args.port_offset
    shutil.rmtree(root, ignore_errors=True)
    kafka = KafkaBroker(root / "kafka", 19092 + at, 19093 + at, request_log=args.requests)
    postgres = PostgresServer(root / "postgres", 15432 + at, settings=pg_counts.PRELOAD)
    profile_out = root / f"{args.profile}.prof"
    service_env = pg_counts.service_env(postgres.url, RECON_SERVICES)
    if args.profile:
        service_env[args.profile]["RECON_PROFILE_OUT"] = str(profile_out)
    stack = Stack(
        kafka.bootstrap,
        postgres.url,
        root / "logs",
        intake_port=18080 + at,
        sandbox_port=18090 + at,
        extra_env={"RECON_LOG_LEVEL": "WARNING"},
        service_env=service_env,
    )
    print("starting Postgres, Kafka and recon in .cache/bench ...", flush=True)
    postgres.start()
    kafka.start()
    try:
        await pg_counts.prepare(postgres.url, RECON_SERVICES)
        stack.start_all()
        await _start_instances(stack, {"decider": args.deciders, "dispatcher": args.dispatchers})
        if args.warmup:
            print(f"warming up with {args.warmup} transactions ...", flush=True)
            await drive(
                stack.intake_url,
                "demo-key",
                kafka.bootstrap,
                Topics(),
                args.warmup,
                args.concurrency,
                prefix="warmup",
            )
        roots = {"kafka": _pid(kafka), "postgres": _pid(postgres)}
        roots |= {
            ("provider (sandbox)" if name == "sandbox" else name): process.pid
            for name, process in stack.processes.items()
        }
        idle: CpuUse | None = None
        idle_statements: dict[str, float] | None = None
        if args.idle > 0:
            # What each process burns with nothing to do (polls, heartbeats, the JVM).
            await pg_counts.reset(postgres.url)
            start = snapshot(roots)
            await asyncio.sleep(args.idle)
            idle = CpuUse.between(start, snapshot(roots))
            idle.seconds = {k: v / args.idle for k, v in idle.seconds.items()}
            counted = pg_counts.per_service(await pg_counts.read(postgres.url))
            idle_statements = {k: n / args.idle for k, n in counted.items()}
        if args.profile:
            os.kill(stack.processes[args.profile].pid, signal.SIGUSR1)
        deciders = [
            stack.metrics_url(name) for name in stack.processes if name.startswith("decider")
        ]
        decided = decider_counts(deciders)
        projectors = [stack.metrics_url("projector")]
        projected = projector_counts(projectors)
        requested = request_offset(kafka.requests_log)
        await pg_counts.reset(postgres.url)
        counting_since = time.monotonic()
        before = snapshot(roots)
        result = await drive(
            stack.intake_url, "demo-key", kafka.bootstrap, Topics(), args.count, args.concurrency
        )
        cpu = CpuUse.between(before, snapshot(roots))
        # The inputs that follow the last TransactionCommitted (the receipt's webhooks)
        # belong to the measured transactions: read once the decider has settled.
        print("\n" + decider_table(decided, await settled(deciders), args.count))
        print(projector_table(projected, projector_counts(projectors), args.count))
        statements = await pg_counts.settled(postgres.url)
        # Idle statements are subtracted over the whole counted window, settling included.
        counted_s = time.monotonic() - counting_since
        table = pg_counts.statement_table(
            statements, args.count, idle_statements, counted_s, top=args.statements
        )
        print("\n" + table)
        result.update(
            {
                f"pg_statements_per_tx:{k}": n / args.count
                for k, n in pg_counts.per_service(statements).items()
            }
        )
        if args.requests:
            requests = request_counts(
                kafka.requests_log, requested, request_offset(kafka.requests_log)
            )
            print(
                request_table(requests, args.count)
                + "\n(CPU below includes the request log's cost)"
            )
        if args.profile:
            os.kill(stack.processes[args.profile].pid, signal.SIGUSR2)
        own = {k for k in roots if k != "provider (sandbox)"}
        print(
            f"\nCPU over the measured run (all of each process tree; {args.deciders} decider(s),"
            f" {args.dispatchers} dispatcher(s)):"
        )
        print(cpu.table(args.count, own, idle, result["seconds"]), flush=True)
        result.update({f"cpu_ms_per_tx:{k}": v * 1000 / args.count for k, v in cpu.seconds.items()})
        result.update(deciders=args.deciders, dispatchers=args.dispatchers)
        if args.hops:
            print("\nhops of the measured transactions (ms between their records' CreateTime):")
            print(hop_table(await read_hops(kafka.bootstrap, Topics(), "bench-")), flush=True)
        return result
    finally:
        stack.stop_all()
        kafka.stop()
        postgres.stop()
        if args.profile:
            _print_profile(profile_out)


async def _start_instances(stack: Stack, counts: dict[str, int]) -> None:
    """Extra instances (`decider-2`, ...) beside the first of each, started before the CPU
    roots are taken so the table counts them; measured only once each group has spread its
    partitions over all of them (an instance that owns nothing would only add CPU)."""
    for service, count in counts.items():
        for i in range(2, count + 1):
            stack.start(service, instance=f"-{i}")
    await stack.wait_ready()
    for service, count in counts.items():
        group = f"{stack.topic_prefix}recon-{service}"
        await wait_spread(stack.kafka_bootstrap, [group], count, timeout=90)


def _pid(server: object) -> int:
    process = getattr(server, "_proc", None)
    return process.pid if process is not None else -1


def _print_profile(path: Path, top: int = 30) -> None:
    """Written by the service on SIGUSR2, complete once the service stopped."""
    if not path.exists():
        print(f"no profile written to {path}", flush=True)
        return
    print(f"\nprofile: {path} (top {top}; `python -m pstats {path}` for more)")
    stats = pstats.Stats(str(path))
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.devtools.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-n", "--count", type=int, default=300, help="transactions to run (default: %(default)s)"
    )
    parser.add_argument(
        "-c",
        "--concurrency",
        type=int,
        default=20,
        help="transactions in flight at once (default: %(default)s)",
    )
    parser.add_argument(
        "--url",
        help="a running recon intake API, e.g. http://127.0.0.1:8080;"
        " without it the benchmark starts its own stack",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=20,
        help="with its own stack: transactions run before the measured ones (default: %(default)s)",
    )
    parser.add_argument(
        "--idle",
        type=float,
        default=5.0,
        help="with its own stack: seconds of idle CPU measured before the run, to tell"
        " per-transaction CPU from background (default: %(default)s)",
    )
    parser.add_argument(
        "--profile",
        choices=PROFILED,
        help="with its own stack: write a cProfile of this service over the measured run"
        " to .cache/bench/SERVICE.prof and print its top functions",
    )
    parser.add_argument(
        "--port-offset",
        type=int,
        default=0,
        help="with its own stack: added to its ports (Kafka 19092, Postgres 15432, intake"
        " 18080, sandbox 18090) and to its directory, to run two benchmarks at once",
    )
    for service in ("decider", "dispatcher"):
        parser.add_argument(
            f"--{service}s",
            type=int,
            default=1,
            metavar="N",
            help=f"with its own stack: {service} processes sharing the partitions, 1 to"
            f" {PARTITIONS} (the partitions per topic; more would own none) (default: 1)",
        )
    parser.add_argument(
        "--hops",
        action="store_true",
        help="with its own stack: read the run back from Kafka and print each hop's p50/p99",
    )
    parser.add_argument(
        "--requests",
        action="store_true",
        help="with its own stack: count the broker's requests by kind over the measured run"
        " (Kafka's request log, which costs the broker CPU)",
    )
    parser.add_argument(
        "--statements",
        type=int,
        default=25,
        metavar="N",
        help="with its own stack: the N most run Postgres statements to print, 0 for every"
        " one (default: %(default)s)",
    )
    parser.add_argument(
        "--json", type=Path, help="also write the results (and CPU per process) to this file"
    )
    parser.add_argument("--api-key", default="demo-key", help="with --url (default: demo-key)")
    parser.add_argument(
        "--kafka",
        default=os.environ.get("RECON_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        help="with --url: that recon's Kafka (default: %(default)s)",
    )
    parser.add_argument(
        "--topic-prefix",
        default=os.environ.get("RECON_TOPIC_PREFIX", ""),
        help="with --url: that recon's topic prefix (default: none)",
    )
    args = parser.parse_args(argv)
    if args.count < 1 or args.concurrency < 1:
        parser.error("--count and --concurrency must be at least 1")
    if not (1 <= args.deciders <= PARTITIONS and 1 <= args.dispatchers <= PARTITIONS):
        parser.error(f"--deciders and --dispatchers must be between 1 and {PARTITIONS}")
    if args.url:
        result = asyncio.run(
            drive(
                args.url.rstrip("/"),
                args.api_key,
                args.kafka,
                Topics(args.topic_prefix),
                args.count,
                args.concurrency,
            )
        )
    else:
        result = asyncio.run(_with_own_stack(args))
    # These three lines are parsed by ../shared/peer-bench/compare.py: keep their shape.
    print(
        f"\n{result['transactions']:.0f} transactions, concurrency "
        f"{result['concurrency']:.0f}, {result['seconds']:.1f} s\n"
        f"throughput {result['throughput_tx_per_s']:.1f} tx/s\n"
        f"accept->commit p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, "
        f"max {result['max_ms']:.0f} ms\n"
        f"{result['retries']:.0f} submissions retried",
        flush=True,
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
