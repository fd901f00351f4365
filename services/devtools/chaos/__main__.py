"""`python -m services.devtools.chaos` (what `make chaos` runs): a chaos run on its own Kafka,
Postgres and recon processes in .cache/chaos, then the verdict table. Exit status 0 only
when every check passes."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from pathlib import Path

from events.topics import Topics
from services.devtools.chaos.checks import table
from services.devtools.chaos.cluster_faults import OneBrokerAtATime
from services.devtools.chaos.nemesis import Server
from services.devtools.chaos.run import ChaosConfig, run_chaos
from services.devtools.infra._process import REPO_ROOT
from services.devtools.ports import free_port
from services.devtools.stack import Stack


async def _main(config: ChaosConfig, root: Path) -> int:
    from services.devtools.infra.kafka import KafkaBroker
    from services.devtools.infra.kafka_cluster import KafkaCluster
    from services.devtools.infra.postgres import PostgresServer

    shutil.rmtree(root, ignore_errors=True)
    kafka: KafkaBroker | KafkaCluster
    broken: Server
    env: dict[str, str] = {}
    if config.brokers == 1:
        kafka = broken = KafkaBroker(root / "kafka", free_port(), free_port())
    else:
        ports = [free_port() for _ in range(config.brokers)]
        kafka = KafkaCluster(root / "kafka", ports, [free_port() for _ in ports])
        # Each broker fault takes down one node (services.devtools.chaos.cluster_faults).
        broken = OneBrokerAtATime(kafka, Topics("").commands, lambda line: print(line, flush=True))
        env = {
            "RECON_KAFKA_REPLICATION_FACTOR": str(kafka.replication),
            "RECON_KAFKA_MIN_INSYNC_REPLICAS": str(kafka.min_insync),
        }
    postgres = PostgresServer(root / "postgres", free_port())
    stack = Stack(
        kafka.bootstrap,
        postgres.url,
        root / "logs",
        intake_port=free_port(),
        sandbox_port=free_port(),
        extra_env=env,
    )
    print(f"starting Postgres and Kafka ({config.brokers} node(s)) in {root} ...", flush=True)
    await asyncio.to_thread(postgres.start)
    await asyncio.to_thread(kafka.start)
    try:
        verdict, history = await run_chaos(
            config, stack, broken, postgres, log=lambda line: print(line, flush=True)
        )
    finally:
        await asyncio.to_thread(kafka.stop)
        await asyncio.to_thread(postgres.stop)
    for note in history.notes:
        print(f"note: {note}")
    if not history.audit_verify_ok:
        print(f"audit verify:\n{history.audit_verify_output[-3000:]}")
    if not history.rebuild_compare_ok:
        print(f"audit rebuild --compare:\n{history.rebuild_compare_output[-3000:]}")
    print()
    print(table(verdict, examples=10), flush=True)
    print(f"logs: {stack.log_dir}")
    return 0 if verdict.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.devtools.chaos", description=__doc__)
    parser.add_argument("--transactions", type=int, default=300, help="default: %(default)s")
    parser.add_argument("--faults", type=int, default=12, help="nemesis actions (%(default)s)")
    parser.add_argument("--seed", type=int, help="replay a run (default: a random seed)")
    parser.add_argument("--concurrency", type=int, default=8, help="default: %(default)s")
    parser.add_argument(
        "--rate", type=float, default=8.0, help="submissions per second (%(default)s)"
    )
    parser.add_argument(
        "--settle-timeout", type=float, default=240.0, help="seconds to quiescence (240)"
    )
    parser.add_argument(
        "--brokers",
        type=int,
        choices=(1, 3),
        default=1,
        help="Kafka nodes: 3 is a KRaft cluster (replication 3, min.insync 2) whose broker "
        "faults take down one node at a time (default: %(default)s)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        help="where Kafka, Postgres and the logs live (default: .cache/chaos, or "
        ".cache/chaos-cluster with --brokers 3, so both can run at once)",
    )
    args = parser.parse_args(argv)
    if args.transactions < 1 or args.faults < 0 or args.concurrency < 1 or args.rate <= 0:
        parser.error("--transactions, --concurrency >= 1, --faults >= 0, --rate > 0")
    config = ChaosConfig(
        args.transactions,
        args.faults,
        args.seed,
        args.concurrency,
        args.rate,
        args.settle_timeout,
        args.brokers,
    )
    default_dir = "chaos" if args.brokers == 1 else "chaos-cluster"
    return asyncio.run(_main(config, args.dir or REPO_ROOT / ".cache" / default_dir))


if __name__ == "__main__":
    sys.exit(main())
