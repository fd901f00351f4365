"""`python -m services.devtools.chaos` (what `make chaos` runs): a chaos run on its own Kafka,
Postgres and recon processes in .cache/chaos, then the verdict table. Exit status 0 only
when every check passes."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import sys

from services.devtools.chaos.checks import table
from services.devtools.chaos.run import ChaosConfig, run_chaos
from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _main(config: ChaosConfig) -> int:
    from services.devtools.infra.kafka import KafkaBroker
    from services.devtools.infra.postgres import PostgresServer

    root = REPO_ROOT / ".cache" / "chaos"
    shutil.rmtree(root, ignore_errors=True)
    kafka = KafkaBroker(root / "kafka", _free_port(), _free_port())
    postgres = PostgresServer(root / "postgres", _free_port())
    stack = Stack(
        kafka.bootstrap,
        postgres.url,
        root / "logs",
        intake_port=_free_port(),
        sandbox_port=_free_port(),
    )
    print(f"starting Postgres and Kafka in {root} ...", flush=True)
    await asyncio.to_thread(postgres.start)
    await asyncio.to_thread(kafka.start)
    try:
        verdict, history = await run_chaos(
            config, stack, kafka, postgres, log=lambda line: print(line, flush=True)
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
    args = parser.parse_args(argv)
    if args.transactions < 1 or args.faults < 0 or args.concurrency < 1 or args.rate <= 0:
        parser.error("--transactions, --concurrency >= 1, --faults >= 0, --rate > 0")
    config = ChaosConfig(
        args.transactions, args.faults, args.seed, args.concurrency, args.rate, args.settle_timeout
    )
    return asyncio.run(_main(config))


if __name__ == "__main__":
    sys.exit(main())
