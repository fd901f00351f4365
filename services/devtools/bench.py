"""Benchmark: N transactions through the whole system, accept-to-commit latency.

`python -m services.devtools.bench` (what `make bench` runs) starts its own Kafka, Postgres,
sandbox and recon services in .cache/bench, unless --url points it at a running
recon (such as `make run`'s). Each transaction is the README's: reserve, charge, and
an email on commit. Latency runs from the intake's 202 to the moment a read_committed
consumer of recon.events receives the transaction's TransactionCommitted event: the
commit as the log records it, without polling the API (which would load the very
system being measured). The client is cheap on purpose, since it shares the machine with
what it measures: aiohttp for the submissions, one watcher consumer that decodes only the
records that end a transaction, and its own CPU per transaction printed after the run.
`--warmup N` runs N transactions first that are not measured (with --url too, where it
defaults to 0: docs/benchmark.md).

With its own stack it also prints the CPU seconds each process used over the measured run,
per transaction (services.devtools.cpu_account), after `--warmup` transactions that are not
measured; `--profile SERVICE` writes a cProfile of that service over the measured run
(services.profiling) and prints its top functions. It prints T, the decider's Kafka
transactions per transaction, inputs per decider transaction, and the projector's batches
and Postgres statements per transaction (counts: less load-dependent than CPU);
`--requests` also counts the broker's requests per transaction by kind and by client (recon's
own apart from all clients'), and each client's fetches (empty ones, what the others
carried), from Kafka's request log (which costs the broker CPU: read CPU from a run without
it). It prints Postgres
statements per transaction by process and by statement (services.devtools.pg_counts).
`--webhooks-to URL` makes its sandbox deliver webhooks to URL (a sink) instead of recon's
intake, as `make run WEBHOOKS_TO=URL` does for a stack that --url points at.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import resource
import shutil
import signal
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import aiohttp
import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from events.event_type_header import passed_over
from events.topics import PARTITIONS, Topics
from services.cli.progress import Progress
from services.config import MAX_PARTITIONS
from services.devtools.cpu_account import CpuUse, snapshot
from services.devtools.infra._process import REPO_ROOT
from services.devtools.sandbox.webhook_config import delivery_delay_ms
from services.devtools.stack import SERVICES, Stack, webhook_url
from services.intake.example import example_transaction
from services.kafka_clients import PREFETCH_BACKOFF_S, client_id

# The prefix of the client ids of the benchmark's own Kafka clients (its watcher, its hops
# reader): the broker's request log tells them from recon's (services.kafka_clients).
RIG_CLIENTS = "bench-"

# The events that end a transaction: the watcher decodes a record only when its bytes name
# one of them (or its `type` header does), and decodes it to be sure.
ENDINGS = ("TransactionCommitted", "TransactionFailed", "TransactionNeedsReview")
_ENDING_BYTES = tuple(name.encode() for name in ENDINGS)


def ending(record: ConsumerRecord[bytes, bytes]) -> tuple[str, str] | None:
    """(tx_id, type) of a record that ends a transaction, None for any other.

    The client's CPU is part of what a comparison counts, and most of the records it reads
    (accepted, dispatched, observed, the receipt's after the commit) end nothing: the
    `type` header the decider writes (events.event_type_header), and a byte test for a
    record written before it, tell them apart without json.loads; a record that passes is
    decoded and its envelope's `type` decides, so a payload that merely mentions an ending
    costs a decode, never a wrong result."""
    if passed_over(record.headers, ENDINGS):
        return None
    if record.value is None or not any(b in record.value for b in _ENDING_BYTES):
        return None
    envelope = json.loads(record.value)
    if envelope.get("type") not in ENDINGS:
        return None
    return envelope["tx_id"], envelope["type"]


class CommitWatcher:
    """Resolves a future per transaction when its TransactionCommitted is readable.

    One consumer, assigned every partition of recon.events, taking each fetch whole
    (getmany): aiokafka leaves a partition whose fetched records still wait to be taken out
    of the next fetch, and one connection carries one fetch at a time, so a consumer that
    took records one by one made a transaction's commit wait for another partition's long
    poll (fetch_max_wait_ms); taken whole, every partition is in the next fetch at once, as
    recon's own consumers read (services.kafka_clients). One consumer instead of one per
    partition: a quarter of the fetches, which the broker serves inside the measured
    system's CPU, and a cheaper client."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.bootstrap = bootstrap
        self.topic = topics.events
        self.waiting: dict[str, asyncio.Future[float]] = {}
        self.consumer: AIOKafkaConsumer | None = None
        self.task: asyncio.Task[None] | None = None

    def _consumer(self, *topics: str) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            *topics,
            bootstrap_servers=self.bootstrap,
            client_id=f"{RIG_CLIENTS}watcher",
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
        consumer = self._consumer()
        await consumer.start()
        try:
            tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            # How long fetched records may wait to be taken before aiokafka fetches without
            # them: getmany takes them at once, so this only bounds a lost wake-up
            # (services.kafka_clients).
            consumer._fetcher._prefetch_backoff = PREFETCH_BACKOFF_S
        except BaseException:
            await consumer.stop()
            raise
        self.consumer = consumer
        self.task = asyncio.create_task(self._watch(consumer))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.consumer is not None:
            await self.consumer.stop()

    def expect(self, tx_id: str) -> asyncio.Future[float]:
        self.waiting[tx_id] = asyncio.get_running_loop().create_future()
        return self.waiting[tx_id]

    async def _watch(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=1000)
            now = time.perf_counter()
            for records in batches.values():
                for record in records:
                    self._take(record, now)

    def _take(self, record: ConsumerRecord[bytes, bytes], now: float) -> None:
        # The key is "tenant/tx_id" (events.keys.partition_key): a record of a transaction
        # nobody waits for, or one already ended, is skipped before its value is looked at.
        if record.key is not None:
            future = self.waiting.get(record.key.decode().partition("/")[2])
            if future is None or future.done():
                return
        ended = ending(record)
        if ended is None:
            return
        tx_id, kind = ended
        future = self.waiting.get(tx_id)
        if future is None or future.done():
            return
        if kind == "TransactionCommitted":
            future.set_result(now)
        else:
            future.set_exception(RuntimeError(f"{tx_id}: {kind}"))


KEEPALIVE_EXPIRY_S = 5.0
SUBMIT_ATTEMPTS = 5
# What a submission may meet instead of an answer: refused, reset, cut off, timed out.
TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)


async def submit(
    session: aiohttp.ClientSession,
    url: str,
    tx_id: str,
    headers: dict[str, str],
    retries: list[str],
) -> None:
    """POST the intent until it is accepted. Resending is safe: the same tx_id with the
    same body is the same intent (202 again, nothing new). A 503 asks for exactly that; a
    dropped connection leaves the outcome unknown, which a resend settles. Every retry is
    counted and reported, so a benchmark that needed them says so."""
    body = orjson.dumps(example_transaction(tx_id))
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        try:
            async with session.post(url, data=body, headers=headers) as response:
                # Read to the end, so that the connection goes back to the pool.
                text = (await response.read()).decode("utf-8", "replace")
                status = response.status
        except TRANSPORT_ERRORS as error:
            if attempt == SUBMIT_ATTEMPTS:
                raise
            retries.append(f"{tx_id}: {error!r}")
        else:
            if status == 202:
                return
            if status != 503 or attempt == SUBMIT_ATTEMPTS:
                raise RuntimeError(f"{tx_id}: intake answered {status}: {text}")
            retries.append(f"{tx_id}: 503 {text}")
        await asyncio.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


def client_cpu_s() -> float:
    """This process's CPU seconds so far (the client: the stack's processes are children,
    counted apart)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def drive(
    url: str,
    api_key: str,
    bootstrap: str,
    topics: Topics,
    count: int,
    concurrency: int,
    prefix: str = "bench",
) -> dict[str, float]:
    """Runs `count` transactions, at most `concurrency` in flight: throughput, latency, and
    the client's own CPU per transaction. aiohttp, not httpx: the client shares the machine
    with what it measures, and httpx cost 1.4-1.9 ms of CPU per POST against aiohttp's 0.3
    (services/providers/http.py)."""
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    run = uuid.uuid4().hex[:8]
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    retries: list[str] = []
    # Idle connections are dropped by the client before the intake's keep-alive timeout
    # (services.intake.__main__.KEEP_ALIVE_S) can close them under a request.
    connector = aiohttp.TCPConnector(limit=concurrency * 2, keepalive_timeout=KEEPALIVE_EXPIRY_S)
    async with (
        aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=30),
            cookie_jar=aiohttp.DummyCookieJar(),
        ) as session,
        CommitWatcher(bootstrap, topics) as watcher,
    ):

        async def one(i: int) -> None:
            tx_id = f"{prefix}-{run}-{i}"
            async with gate:
                committed = watcher.expect(tx_id)
                await submit(session, f"{url}/v1/transactions", tx_id, headers, retries)
                accepted = time.perf_counter()
                latencies.append(await asyncio.wait_for(committed, 120) - accepted)
                progress.advance()

        # A live bar on a terminal, else a line every tenth (services.cli.progress).
        progress = Progress(prefix, max(1, count // 10), count, unit="transactions committed")
        started = time.perf_counter()
        cpu_before = client_cpu_s()
        with progress:
            await asyncio.gather(*(one(i) for i in range(count)))
        elapsed = time.perf_counter() - started
        client_cpu = client_cpu_s() - cpu_before
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
        "client_cpu_ms_per_tx": client_cpu * 1000 / count,
    }


async def settled(deciders: list[str], quiet_s: float = 1.0, limit_s: float = 15.0) -> Counter[str]:
    """The deciders' counts once their committed inputs stopped moving for `quiet_s`."""
    from services.devtools.kafka_counts import decider_counts

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
# The broker's JIT compiler threads are shown apart (a row within kafka's): compiling is its
# warm-up, which a run after too short a `--warmup` still pays per transaction.
JVMS = ("kafka",)
# Each connects to Postgres as a role of its own, which names it in pg_stat_statements.
RECON_SERVICES = PROFILED


async def _with_own_stack(args: argparse.Namespace) -> dict[str, float]:
    # Imported here, not at the top: with --url the client starts without them (a
    # comparison counts the client's start-up in its CPU).
    from services.devtools import pg_counts, pg_server_cost
    from services.devtools.fetch_counts import fetch_table, fetches_by_client
    from services.devtools.hops import hop_table, read_hops
    from services.devtools.infra.kafka import KafkaBroker
    from services.devtools.infra.postgres import PostgresServer
    from services.devtools.kafka_counts import (
        client_table,
        decider_counts,
        decider_table,
        request_counts,
        request_offset,
        request_table,
        request_times,
        requests_by_client,
        requests_by_owner,
        requests_headline,
        transactions_in_broker,
        transactions_table,
    )
    from services.devtools.projector_counts import projector_counts, projector_table

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
        extra_env={"RECON_LOG_LEVEL": "WARNING", "RECON_KAFKA_PARTITIONS": str(args.partitions)},
        service_env=service_env,
        webhooks_to=args.webhooks_to,
        webhook_delay_ms=args.webhook_delay_ms,
    )
    print("starting Postgres, Kafka and recon in .cache/bench ...", flush=True)
    postgres.start()
    kafka.start()
    try:
        await pg_counts.prepare(postgres.url, RECON_SERVICES)
        stack.start_all()
        await _start_instances(stack, {"decider": args.deciders})
        await _warm_up(stack.intake_url, "demo-key", kafka.bootstrap, Topics(), args)
        deciders = [
            stack.metrics_url(name) for name in stack.processes if name.startswith("decider")
        ]
        if args.warmup and args.webhook_delay_ms:
            # The warm-up's last webhooks come that late: the run is counted from after them.
            print("waiting for the warm-up's late webhooks ...", flush=True)
            await asyncio.sleep(args.webhook_delay_ms / 1000)
            await settled(deciders)
        if args.warmup:
            # After no warm-up the tables are empty, and autovacuum never analyses an empty
            # table (its threshold is 50 changed rows): statistics of empty tables would make
            # every plan cost nothing, a state no live system reaches.
            await pg_server_cost.analyze(postgres.url)
        roots = {"kafka": kafka.pid or -1, "postgres": postgres.pid or -1}
        roots |= {
            ("provider (sandbox)" if name == "sandbox" else name): process.pid
            for name, process in stack.processes.items()
        }
        idle: CpuUse | None = None
        idle_statements: dict[str, float] | None = None
        if args.idle > 0:
            # What each process burns with nothing to do (polls, heartbeats, the JVM).
            await pg_counts.reset(postgres.url)
            start = snapshot(roots, jvms=JVMS)
            await asyncio.sleep(args.idle)
            idle = CpuUse.between(start, snapshot(roots, jvms=JVMS))
            idle.seconds = {k: v / args.idle for k, v in idle.seconds.items()}
            counted = pg_counts.per_service(await pg_counts.read(postgres.url))
            idle_statements = {k: n / args.idle for k, n in counted.items()}
        if args.profile:
            os.kill(stack.processes[args.profile].pid, signal.SIGUSR1)
        decided = decider_counts(deciders)
        projectors = [stack.metrics_url("projector")]
        projected = projector_counts(projectors)
        requested = request_offset(kafka.requests_log)
        await pg_counts.reset(postgres.url)
        counting_since = time.monotonic()
        wal_before = await pg_server_cost.wal(postgres.url)
        server_before = pg_server_cost.processes_cpu(roots["postgres"])
        before = snapshot(roots, jvms=JVMS)
        result = await drive(
            stack.intake_url, "demo-key", kafka.bootstrap, Topics(), args.count, args.concurrency
        )
        # The inputs that follow the last TransactionCommitted (the receipt's webhooks)
        # belong to the measured transactions: read once the decider has settled. Webhooks
        # sent late come that long after the last commit: their CPU is the run's too (with
        # the idle CPU of the wait, `--idle` says how much), so the CPU is read after them.
        decided_after: Counter[str] | None = None
        if args.webhook_delay_ms:
            print("waiting for the run's late webhooks ...", flush=True)
            await asyncio.sleep(args.webhook_delay_ms / 1000)
            decided_after = await settled(deciders)
        cpu = CpuUse.between(before, snapshot(roots, jvms=JVMS))
        server_after = pg_server_cost.processes_cpu(roots["postgres"])
        wal_after = await pg_server_cost.wal(postgres.url)
        decided_after = decided_after or await settled(deciders)
        print("\n" + decider_table(decided, decided_after, args.count))
        print(projector_table(projected, projector_counts(projectors), args.count))
        statements = await pg_counts.settled(postgres.url)
        # Idle statements are subtracted over the whole counted window, settling included.
        counted_s = time.monotonic() - counting_since
        table = pg_counts.statement_table(
            statements,
            args.count,
            idle_statements,
            counted_s,
            top=args.statements,
            exec_ms=await pg_counts.exec_ms(postgres.url),
        )
        print("\n" + table)
        print(await pg_server_cost.by_time(postgres.url, args.count))
        print(
            "\n"
            + pg_server_cost.table(server_before, server_after, wal_before, wal_after, args.count)
        )
        result.update(
            {
                f"pg_statements_per_tx:{k}": n / args.count
                for k, n in pg_counts.per_service(statements).items()
            }
        )
        if args.requests:
            until = request_offset(kafka.requests_log)
            requests = request_counts(kafka.requests_log, requested, until)
            times = request_times(kafka.requests_log, requested, until)
            spans = transactions_in_broker(kafka.requests_log, requested, until, "recon-decider")
            clients = requests_by_client(kafka.requests_log, requested, until)
            recons = "recon's"
            owners = {client_id(""): recons, RIG_CLIENTS: "the rig's (bench)"}
            fetches = fetches_by_client(kafka.requests_log, requested, until)
            print(
                transactions_table(spans, "decider")
                + "\n"
                + requests_headline(clients, args.count, owners, recons)
                + "\n"
                + request_table(requests, args.count, times)
                + "\n"
                + client_table(clients, args.count, owners)
                + "\n"
                + fetch_table(fetches, args.count)
                + "\n(CPU below includes the request log's cost)"
            )
            by_owner = requests_by_owner(clients, owners)
            result.update(
                {
                    f"kafka_requests_per_tx:{client}:{kind}": n / args.count
                    for (client, kind), n in clients.items()
                }
                | {
                    "kafka_requests_per_tx_recon": by_owner[recons] / args.count,
                    "kafka_requests_per_tx_all_clients": by_owner.total() / args.count,
                }
                | {
                    f"kafka_fetches:{client}:{figure}": value
                    for client, seen in fetches.items()
                    for figure, value in (
                        ("per_tx", seen.fetches / args.count),
                        ("empty", seen.empty),
                        ("offsets_per_fetch", seen.offsets / max(seen.counted, 1)),
                    )
                }
            )
        if args.profile:
            os.kill(stack.processes[args.profile].pid, signal.SIGUSR2)
        own = {k for k in roots if k != "provider (sandbox)"}
        print(
            f"\nCPU over the measured run (all of each process tree; {args.deciders} decider(s)):"
        )
        print(cpu.table(args.count, own, idle, result["seconds"]), flush=True)
        result.update({f"cpu_ms_per_tx:{k}": v * 1000 / args.count for k, v in cpu.seconds.items()})
        result.update(deciders=args.deciders)
        if args.hops:
            print("\nhops of the measured transactions (ms between their records' CreateTime):")
            print(
                hop_table(
                    await read_hops(kafka.bootstrap, Topics(), "bench-", f"{RIG_CLIENTS}hops")
                ),
                flush=True,
            )
        return result
    finally:
        stack.stop_all()
        kafka.stop()
        postgres.stop()
        if args.profile:
            _print_profile(profile_out)


async def _warm_up(
    url: str, api_key: str, bootstrap: str, topics: Topics, args: argparse.Namespace
) -> None:
    """`--warmup` transactions before the measured ones, at the same concurrency: the JIT of
    Kafka's JVM compiles the paths the run takes, and connections and caches are made."""
    if args.warmup:
        print(f"warming up with {args.warmup} transactions ...", flush=True)
        await drive(url, api_key, bootstrap, topics, args.warmup, args.concurrency, "warmup")


async def _with_url(args: argparse.Namespace) -> dict[str, float]:
    url, topics = args.url.rstrip("/"), Topics(args.topic_prefix)
    await _warm_up(url, args.api_key, args.kafka, topics, args)
    return await drive(url, args.api_key, args.kafka, topics, args.count, args.concurrency)


async def _start_instances(stack: Stack, counts: dict[str, int]) -> None:
    """Extra instances (`decider-2`, ...) beside the first of each, started before the CPU
    roots are taken so the table counts them; measured only once each group has spread its
    partitions over all of them (an instance that owns nothing would only add CPU)."""
    from services.devtools.consumer_groups import wait_spread

    for service, count in counts.items():
        for i in range(2, count + 1):
            stack.start(service, instance=f"-{i}")
    await stack.wait_ready()
    for service, count in counts.items():
        group = f"{stack.topic_prefix}recon-{service}"
        await wait_spread(
            stack.kafka_bootstrap, [group], count, timeout=90, client_id=f"{RIG_CLIENTS}groups"
        )


def _print_profile(path: Path, top: int = 30) -> None:
    """Written by the service on SIGUSR2, complete once the service stopped."""
    if not path.exists():
        print(f"no profile written to {path}", flush=True)
        return
    print(f"\nprofile: {path} (top {top}; `python -m pstats {path}` for more)")
    stats = pstats.Stats(str(path))
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


# --warmup's default: with its own stack, a fresh Kafka is cold; with --url, none, since a
# comparison (../shared/peer-bench/compare.py) reads the machine's CPU around the whole
# command and would count a warm-up as measured: warm that stack once before it instead
# (docs/benchmark.md).
WARMUP_OWN_STACK = 20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
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
        metavar="N",
        help="transactions run before the measured ones, not measured, at the same"
        f" concurrency (default: {WARMUP_OWN_STACK} with its own stack, 0 with --url)",
    )
    parser.add_argument(
        "--webhooks-to",
        type=webhook_url,
        metavar="URL",
        help="with its own stack: the sandbox delivers its webhooks to URL (a sink) instead"
        " of recon's intake, as a comparison with a system that ingests none does"
        " (python -m services.devtools.stack --webhooks-to, docs/benchmark.md)",
    )
    parser.add_argument(
        "--webhook-delay-ms",
        type=delivery_delay_ms,
        default=0,
        metavar="MS",
        help="with its own stack: each webhook's first delivery waits MS after its effect,"
        " as a real provider's delivery queue does (default: at once; docs/benchmark.md"
        ' "Webhooks that come late")',
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
    parser.add_argument(
        "--deciders",
        type=int,
        default=1,
        metavar="N",
        help="with its own stack: decider processes sharing the partitions (each calls the"
        " providers of what it dispatches), 1 to --partitions (more would own none)"
        " (default: 1)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=PARTITIONS,
        metavar="N",
        help="with its own stack: the topics' partition count (its RECON_KAFKA_PARTITIONS),"
        f" 1 to {MAX_PARTITIONS}; each partition is a Kafka transaction stream of its own"
        f' (docs/benchmark.md "One partition against four") (default: {PARTITIONS})',
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
    if args.warmup is not None and args.warmup < 0:
        parser.error("--warmup must be 0 or more")
    if not 1 <= args.partitions <= MAX_PARTITIONS:
        parser.error(f"--partitions must be between 1 and {MAX_PARTITIONS}")
    if not 1 <= args.deciders <= args.partitions:
        parser.error(f"--deciders must be between 1 and --partitions ({args.partitions})")
    if args.url and args.webhooks_to:
        parser.error(
            "--webhooks-to is for the benchmark's own stack; with --url, start that stack"
            " with it (python -m services.devtools.stack --webhooks-to URL)"
        )
    if args.url and args.partitions != PARTITIONS:
        parser.error(
            "--partitions is for the benchmark's own stack; with --url, start that stack"
            " with RECON_KAFKA_PARTITIONS"
        )
    if args.url and args.webhook_delay_ms:
        parser.error(
            "--webhook-delay-ms is for the benchmark's own stack; with --url, start that"
            " stack with it (python -m services.devtools.stack --webhook-delay-ms MS)"
        )
    if args.warmup is None:
        args.warmup = 0 if args.url else WARMUP_OWN_STACK
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = asyncio.run(_with_url(args) if args.url else _with_own_stack(args))
    # Not one of the summary lines below (their shape is parsed): the client's CPU over the
    # measured run, in this process, without the interpreter's start-up.
    print(
        f"\nbench client CPU {result['client_cpu_ms_per_tx']:.2f} ms per transaction"
        " (this process, the measured run)",
        flush=True,
    )
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
