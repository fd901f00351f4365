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
from services.devtools.example_intent import example_transaction
from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack


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


async def drive(
    url: str, api_key: str, bootstrap: str, topics: Topics, count: int, concurrency: int
) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {api_key}"}
    run = uuid.uuid4().hex[:8]
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency * 2)

    async with (
        httpx.AsyncClient(timeout=30, limits=limits) as client,
        CommitWatcher(bootstrap, topics) as watcher,
    ):

        async def one(i: int) -> None:
            tx_id = f"bench-{run}-{i}"
            async with gate:
                committed = watcher.expect(tx_id)
                response = await client.post(
                    f"{url}/v1/transactions", json=example_transaction(tx_id), headers=headers
                )
                if response.status_code != 202:
                    raise RuntimeError(
                        f"{tx_id}: intake answered {response.status_code}: {response.text}"
                    )
                accepted = time.perf_counter()
                latencies.append(await asyncio.wait_for(committed, 120) - accepted)
                if len(latencies) % max(1, count // 10) == 0:
                    print(f"  {len(latencies)}/{count} committed", flush=True)

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "transactions": count,
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
        f"throughput {result['throughput_tx_per_s']:.1f} tx/s\n"
        f"accept->commit p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, "
        f"max {result['max_ms']:.0f} ms",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
