"""Benchmark: N transactions through the whole system, accept-to-commit latency.

`python -m services.devtools.bench` (what `make bench` runs) starts its own Kafka, Postgres,
sandbox and recon services in .cache/bench, unless --url points it at a running
recon (such as `make run`'s). Each transaction is the README's: reserve, charge, and
an email on commit. Latency runs from the intake's 202 to the moment a read_committed
consumer of recon.events receives the transaction's TransactionCommitted event: the
commit as the log records it, without polling the API (which would load the very
system being measured).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

import httpx
from aiokafka import AIOKafkaConsumer

from events.topics import Topics
from services.cli.progress import Progress
from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack
from services.intake.example import example_transaction


class CommitWatcher:
    """Resolves a future per transaction when its TransactionCommitted is readable."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.waiting: dict[str, asyncio.Future[float]] = {}
        self.consumer = AIOKafkaConsumer(
            topics.events,
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="latest",
            enable_auto_commit=False,
            fetch_max_wait_ms=50,
        )

    async def __aenter__(self) -> CommitWatcher:
        await self.consumer.start()
        await self.consumer.seek_to_end()
        self.task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.task.cancel()
        await self.consumer.stop()

    def expect(self, tx_id: str) -> asyncio.Future[float]:
        self.waiting[tx_id] = asyncio.get_running_loop().create_future()
        return self.waiting[tx_id]

    async def _watch(self) -> None:
        async for record in self.consumer:
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
    url: str, api_key: str, bootstrap: str, topics: Topics, count: int, concurrency: int
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
            tx_id = f"bench-{run}-{i}"
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


async def _with_own_stack(args: argparse.Namespace) -> dict[str, float]:
    from services.devtools.infra.kafka import KafkaBroker
    from services.devtools.infra.postgres import PostgresServer

    root: Path = REPO_ROOT / ".cache" / "bench"
    shutil.rmtree(root, ignore_errors=True)
    kafka = KafkaBroker(root / "kafka", 19092, 19093)
    postgres = PostgresServer(root / "postgres", 15432)
    stack = Stack(
        kafka.bootstrap,
        postgres.url,
        root / "logs",
        intake_port=18080,
        sandbox_port=18090,
        extra_env={"RECON_LOG_LEVEL": "WARNING"},
    )
    print("starting Postgres, Kafka and recon in .cache/bench ...", flush=True)
    postgres.start()
    kafka.start()
    try:
        stack.start_all()
        await stack.wait_ready()
        return await drive(
            stack.intake_url, "demo-key", kafka.bootstrap, Topics(), args.count, args.concurrency
        )
    finally:
        stack.stop_all()
        kafka.stop()
        postgres.stop()


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
    print(
        f"\n{result['transactions']:.0f} transactions, concurrency "
        f"{result['concurrency']:.0f}, {result['seconds']:.1f} s\n"
        f"throughput {result['throughput_tx_per_s']:.1f} tx/s, "
        f"{result['retries']:.0f} submissions retried\n"
        f"accept->commit p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, "
        f"max {result['max_ms']:.0f} ms",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
