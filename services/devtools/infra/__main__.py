"""Run the local Kafka broker and Postgres server in the foreground, without Docker.

python -m services.devtools.infra fetch            # Kafka jars (Maven), stripe-mock and
                                                   # promtool (Go), Debian's chromium
                                                   # (apt-get), once
python -m services.devtools.infra up               # start both, print addresses, stop on Ctrl-C
python -m services.devtools.infra up --brokers 3   # a three-node Kafka cluster, not one broker
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from services.devtools.infra._process import InfraError
from services.devtools.infra.chromium import ensure_chromium
from services.devtools.infra.kafka import KafkaBroker, ensure_kafka_jars
from services.devtools.infra.kafka_cluster import KafkaCluster
from services.devtools.infra.local_kafka import BROKER_CHOICES, kafka_env, local_kafka
from services.devtools.infra.postgres import PostgresServer
from services.devtools.infra.promtool import ensure_promtool
from services.devtools.infra.stripe_mock import ensure_stripe_mock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.devtools.infra",
        description="Local Kafka (KRaft, single node) and Postgres for recon, without Docker.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "fetch",
        help="download the Kafka broker jars and build stripe-mock and promtool into "
        ".cache/, install Debian's chromium for the browser tests (each skipped when present)",
    )
    up = commands.add_parser(
        "up",
        help="start Kafka and Postgres and keep them running until SIGINT/SIGTERM",
        description="Start Kafka and Postgres, print the RECON_* environment variables that "
        "point at them, and stop both cleanly on SIGINT or SIGTERM. Data persists in --dir.",
    )
    up.add_argument(
        "--dir",
        type=Path,
        default=Path(".cache/dev"),
        help="data directory, reused across runs (default: %(default)s)",
    )
    up.add_argument(
        "--kafka-port", type=int, default=9092, help="Kafka client port (default: %(default)s)"
    )
    up.add_argument(
        "--kafka-controller-port",
        type=int,
        default=9093,
        help="KRaft controller port of the single broker (default: %(default)s)",
    )
    up.add_argument(
        "--brokers",
        type=int,
        choices=BROKER_CHOICES,
        default=1,
        help="Kafka nodes: 1, or a 3-node KRaft cluster (replication 3, min.insync 2) "
        "whose node i uses ports --kafka-port+2i and +2i+1 (default: %(default)s)",
    )
    up.add_argument(
        "--pg-port", type=int, default=5432, help="Postgres port (default: %(default)s)"
    )
    args = parser.parse_args(argv)

    try:
        if args.command == "fetch":
            print(f"Kafka jars ready in {ensure_kafka_jars(quiet=False)}", flush=True)
            print(f"stripe-mock ready at {ensure_stripe_mock(quiet=False)}", flush=True)
            print(f"promtool ready at {ensure_promtool(quiet=False)}", flush=True)
            print(f"chromium ready at {ensure_chromium(quiet=False)}", flush=True)
            return 0
        kafka: KafkaBroker | KafkaCluster
        if args.brokers == 1:
            kafka = KafkaBroker(args.dir / "kafka", args.kafka_port, args.kafka_controller_port)
        else:
            kafka = local_kafka(args.dir, args.brokers, args.kafka_port)
        return _up(args.dir, kafka, args.pg_port)
    except InfraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _up(data_dir: Path, kafka: KafkaBroker | KafkaCluster, pg_port: int) -> int:
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    # Installed before starting anything so a Ctrl-C during startup still stops what started.
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    ensure_kafka_jars(quiet=False)
    postgres = PostgresServer(data_dir / "postgres", pg_port)
    try:
        postgres.start()
        kafka.start()
        for name, value in kafka_env(kafka).items():
            print(f"{name}={value}")
        print(f"RECON_DATABASE_URL={postgres.url}", flush=True)
        while not stopping.wait(1.0):
            for name, alive in (("kafka", kafka.is_running()), ("postgres", postgres.is_running())):
                if not alive:
                    print(f"error: {name} exited unexpectedly; see {data_dir}", file=sys.stderr)
                    return 1
        return 0
    finally:
        kafka.stop()
        postgres.stop()


if __name__ == "__main__":
    sys.exit(main())
