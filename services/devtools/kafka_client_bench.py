"""Would confluent-kafka cut the decider's Kafka cost? The decider's transactions through
aiokafka and through confluent-kafka (librdkafka), against one real broker, in alternation.

`python -m services.devtools.kafka_client_bench --mode serial` (concurrency 1: each input
is written once the transaction of the one before has committed, and goes in a transaction
of its own) or `--mode batched` (concurrency 30: the inputs are written first, and each
partition's transactions carry --batch inputs, the partitions' transactions concurrently).
Each run is a process of its own (services.devtools.kafka_client_run) on fresh topics,
after a discarded first run that warms the broker's JIT; the runs alternate clients so that
the machine's other load falls on both. Per run: the client process's CPU per transaction
(its threads included), the broker's CPU per transaction and its JIT compilers' part
(inflated by its request log, which it writes for the counts; `--no-requests` for the CPU
alone), each transaction's wall time from its first send to its commit returned (p50/p99),
and the broker's requests per transaction by kind (services.devtools.kafka_counts). See
docs/benchmark.md ("The decider's Kafka client")."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from services.devtools.infra.kafka import KafkaBroker
from services.devtools.kafka_client_run import FEEDER, topic_names
from services.devtools.kafka_client_shape import STEP_HEADER, steps

REPO_ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
# The request kinds a decider transaction makes, in the table's order.
KINDS = ("Fetch", "Produce", "AddPartitionsToTxn", "EndTxn", "WriteTxnMarkers")


async def create_topics(bootstrap: str, prefix: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        compact = {"cleanup.policy": "compact"}
        await admin.create_topics(
            [
                NewTopic(name, PARTITIONS, 1, topic_configs=compact if role == "state" else {})
                for role, name in topic_names(prefix).items()
            ]
        )
    finally:
        await admin.close()


async def feed(
    bootstrap: str, prefix: str, transactions: int, committed: asyncio.StreamReader | None
) -> None:
    """Writes the inputs as the intake does (idempotent, acks=all, not transactional): all
    at once, or each once the worker has committed the one before (`committed` gives a line
    per transaction), as at concurrency 1 where the next input is the answer to a call the
    last transaction dispatched."""
    names = topic_names(prefix)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, client_id=FEEDER, enable_idempotence=True, acks="all"
    )
    await producer.start()
    try:
        for index, step in enumerate(steps(transactions)):
            sent = await producer.send(
                names[step.role],
                value=step.value,
                key=step.key,
                partition=step.partition,
                headers=[(STEP_HEADER, str(index).encode())],
            )
            if committed is not None:
                await sent
                await committed.readline()
        await producer.flush()
    finally:
        await producer.stop()


async def one_run(args: argparse.Namespace, kafka: KafkaBroker, n: int, client: str) -> Any:
    prefix = f"r{n}-"
    await create_topics(kafka.bootstrap, prefix)
    serial = args.mode == "serial"
    transactions = args.transactions + args.warmup
    if not serial:
        await feed(kafka.bootstrap, prefix, transactions, None)
    broker_pid = kafka.pid or 0
    cmd = [sys.executable, "-m", "services.devtools.kafka_client_run", "--client", client]
    cmd += ["--bootstrap", kafka.bootstrap, "--prefix", prefix]
    cmd += ["--transactions", str(transactions), "--warmup", str(args.warmup)]
    cmd += ["--batch", str(1 if serial else args.batch), "--producers", args.producers]
    cmd += ["--linger-ms", str(args.linger_ms)]
    cmd += ["--request-log", str(kafka.requests_log) if args.requests else ""]
    cmd += ["--broker-pid", str(broker_pid), *(["--ack"] if serial else [])]
    worker = await asyncio.create_subprocess_exec(*cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE)
    if serial:
        assert worker.stdout is not None
        await feed(kafka.bootstrap, prefix, transactions, worker.stdout)
    out, _ = await worker.communicate()
    if worker.returncode != 0:
        raise SystemExit(f"{client} run failed ({worker.returncode})")
    return json.loads(out.decode().strip().splitlines()[-1])


def row(result: dict[str, Any]) -> str:
    n = result["transactions"]
    requests = result["requests"]
    total = sum(v for k, v in requests.items() if not k.startswith("(")) or float("nan")
    kinds = " ".join(f"{requests.get(k, 0) / n:5.2f}" for k in KINDS)
    busy = requests.get("(of which CONCURRENT_TRANSACTIONS)", 0) / n
    return (
        f"{result['client']:<20} {n:>5} {result['inputs'] / n:6.2f}"
        f" {result['cpu_s'] * 1000 / n:8.2f} {result['broker_cpu_s'] * 1000 / n:8.2f}"
        f" {result.get('broker_jit_s', 0) * 1000 / n:6.2f}"
        f" {result['p50_ms']:6.1f} {result['p99_ms']:6.1f} {total / n:7.2f}  {kinds} {busy:5.2f}"
    )


HEAD = (
    f"{'client':<20} {'tx':>5} {'in/tx':>6} {'cpu ms':>8} {'broker':>8} {'jit':>6}"
    f" {'p50':>6} {'p99':>6}"
    f" {'req/tx':>7}  " + " ".join(k[:5] for k in KINDS) + " busy"
)


async def main_async(args: argparse.Namespace, root: Path) -> None:
    at = args.port_offset
    kafka = KafkaBroker(root / "kafka", 29092 + at, 29093 + at, request_log=args.requests)
    kafka.start()
    results = []
    try:
        order = args.clients.split(",")
        runs = [order[0]] + order * args.pairs  # the first run warms the broker: not shown
        print(f"mode {args.mode}, producers per {args.producers}; per transaction:")
        print(HEAD, flush=True)
        for n, client in enumerate(runs):
            result = await one_run(args, kafka, n, client)
            if n:
                results.append(result)
                print(row(result), flush=True)
    finally:
        kafka.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))  # noqa: ASYNC240 (done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("serial", "batched"), default="serial")
    parser.add_argument("--clients", default="aiokafka,confluent")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("-n", "--transactions", type=int, default=100, help="README ones")
    parser.add_argument("--warmup", type=int, default=20, help="README transactions first")
    parser.add_argument("--batch", type=int, default=8, help="inputs per transaction, batched")
    parser.add_argument("--producers", choices=("partition", "process"), default="partition")
    parser.add_argument("--linger-ms", type=float, default=0.0, help="confluent's linger.ms")
    parser.add_argument(
        "--no-requests",
        dest="requests",
        action="store_false",
        help="no request log: the broker's CPU without its cost, and no request counts",
    )
    parser.add_argument("--port-offset", type=int, default=0)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    # A fresh broker each time: its data from an earlier run is not wanted.
    root = REPO_ROOT / ".cache" / f"kafka-client-bench{args.port_offset or ''}"
    subprocess.run(["rm", "-rf", str(root)], check=True)
    asyncio.run(main_async(args, root))


if __name__ == "__main__":
    main()
