"""Every recon process, started and stopped together.

`python -m services.devtools.stack` (what `make run` runs) starts Kafka and Postgres from
services.devtools.infra, brings the database to the code's schema version (`python -m
services.cli migrate`, as a deployment does before its services), starts the sandbox
provider and every recon service, prints the URLs and a first request, and stops
everything on Ctrl-C. The end-to-end tests use the same `Stack` to start real processes
and to kill them. A service that exits is started again
after a back-off (services.devtools.restarts), logged loudly; it never stops the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from services.devtools.infra._process import REPO_ROOT, signal_group, terminate, terminate_all
from services.devtools.ports import free_port
from services.devtools.restarts import Restarts
from services.devtools.sandbox.webhook_config import delivery_delay_ms
from services.intake.example import example_curl

# Start order: the provider first, the intake last (its /healthz waits for the others).
SERVICES = (
    "sandbox",
    "decider",
    "projector",
    "saga",
    "reconciler",
    "intents",
    "intake",
)
# The module each runs as (`python -m ...`); a name is also the process's log file.
MODULES = {
    **{name: f"services.{name}" for name in SERVICES},
    "sandbox": "services.devtools.sandbox",
    "reconciler": "services.pull_reconciler",
    "intents": "services.intake.kafka_intents",
}


@dataclass
class Stack:
    kafka_bootstrap: str
    database_url: str
    log_dir: Path
    topic_prefix: str = ""
    intake_port: int = 8080
    sandbox_port: int = 8090
    extra_env: dict[str, str] = field(default_factory=dict)
    # Variables for one service only (the benchmark's profiled process).
    service_env: dict[str, dict[str, str]] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Each recon process's metrics port (RECON_METRICS_PORT), free when first started and
    # kept across restarts, so a scraper finds the same process at the same address.
    metrics_ports: dict[str, int] = field(default_factory=dict)
    # Whether the first recon process started runs the migrate step first: every test and
    # `make run` start through here, so a fresh database gets its schema in this one place.
    # False only for a test of what a process does on a database behind.
    migrate: bool = True
    migrated: bool = False
    # Where the sandbox delivers its webhooks; None: recon's intake, as a real provider's
    # would. A sink instead measures recon without ingesting them (`--webhooks-to`).
    webhooks_to: str | None = None
    # How long after its effect each webhook's first delivery waits (`--webhook-delay-ms`),
    # as a real provider's delivery queue: 0 sends at once.
    webhook_delay_ms: int = 0

    @property
    def intake_url(self) -> str:
        return f"http://127.0.0.1:{self.intake_port}"

    @property
    def sandbox_url(self) -> str:
        return f"http://127.0.0.1:{self.sandbox_port}"

    @property
    def webhook_target(self) -> str:
        return self.webhooks_to or f"{self.intake_url}/v1/webhooks/sandbox"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "RECON_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "RECON_DATABASE_URL": self.database_url,
            "RECON_TOPIC_PREFIX": self.topic_prefix,
            "RECON_INTAKE_PORT": str(self.intake_port),
            "RECON_PROVIDERS": f"sandbox={self.sandbox_url}",
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }

    def metrics_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.metrics_ports[name]}/metrics"

    def start(self, service: str, instance: str = "") -> subprocess.Popen[bytes]:
        """Start `python -m MODULES[service]`; `instance` names a second copy."""
        name = service + instance
        if name in self.processes and self.processes[name].poll() is None:
            raise RuntimeError(f"{name} is already running")
        if service != "sandbox" and self.migrate and not self.migrated:
            self.migrate_database()
        args = [sys.executable, "-m", MODULES[service]]
        env = self.env()
        if service != "sandbox":  # not a recon process: no metrics
            env["RECON_METRICS_PORT"] = str(self.metrics_ports.setdefault(name, free_port()))
        if service == "sandbox":
            args += ["--port", str(self.sandbox_port), "--db", str(self.log_dir / "sandbox.db")]
            # The provider confirms effects by signed webhook to the intake, as real ones do
            # (or to a sink, for a measurement without them).
            args += ["--webhook-url", self.webhook_target]
            args += ["--webhook-delay-ms", str(self.webhook_delay_ms)]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                args,
                cwd=REPO_ROOT,
                env=env | self.service_env.get(service, {}),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes[name] = process
        return process

    def migrate_database(self, echo: bool = False) -> None:
        """`python -m services.cli migrate` against the stack's database, its lines in
        migrate.log (and on stdout with `echo`); a failure stops the start with them."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "services.cli", "migrate"],
            cwd=REPO_ROOT,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        with open(self.log_dir / "migrate.log", "a") as log:
            log.write(done.stdout)
        if echo:
            print(done.stdout, end="", flush=True)
        if done.returncode != 0:
            raise RuntimeError(f"migrate exited with {done.returncode}:\n{done.stdout}")
        self.migrated = True

    def start_all(self) -> None:
        for service in SERVICES:
            self.start(service)

    def kill(self, name: str) -> None:
        """kill -9: no cleanup, no goodbye, exactly like a crash."""
        process = self.processes[name]
        signal_group(process, signal.SIGKILL)
        process.wait()

    def stop(self, name: str, timeout: float = 10) -> None:
        terminate(self.processes.pop(name), signal.SIGTERM, timeout)

    def stop_all(self, timeout: float = 10) -> None:
        """Every process at once (terminate_all): none depends on another being up to exit."""
        processes = list(self.processes.values())
        self.processes.clear()
        terminate_all(processes, signal.SIGTERM, timeout)

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    async def wait_ready(self, timeout: float = 90) -> None:
        """Until the intake's /healthz says Kafka, Postgres and every consumer group
        are up, and the sandbox answers."""
        # Imported here: `python -m services.devtools.bench --url` imports this module and
        # never waits for a stack, and a comparison counts the client's start-up CPU.
        import httpx

        deadline = time.monotonic() + timeout
        last = "no answer yet"
        async with httpx.AsyncClient(timeout=5) as client:
            while time.monotonic() < deadline:
                for name, process in self.processes.items():
                    if process.poll() is not None:
                        raise RuntimeError(
                            f"{name} exited with {process.returncode}:\n{self.log_tail(name)}"
                        )
                try:
                    sandbox = await client.get(self.sandbox_url + "/healthz")
                    intake = await client.get(self.intake_url + "/healthz")
                    if sandbox.status_code == 200 and intake.status_code == 200:
                        return
                    last = f"sandbox {sandbox.status_code}, intake {intake.text}"
                except httpx.HTTPError as error:
                    last = repr(error)
                # Polled, for want of a signal to wait on: ready means every consumer group
                # has a member as its coordinator sees it, which Kafka answers when asked and
                # never announces. One /healthz took ~4 ms of CPU (intake and client in one
                # process, its four groups described), ~1 % of a stack's start at this pace;
                # the period adds 0.15 s on average to a 4-5 s start.
                await asyncio.sleep(0.3)
        # Alive but not ready: each recon process logs where its tasks wait
        # (services.task_dump), for the log tails of whoever reads this failure.
        for name, process in self.processes.items():
            if name != "sandbox" and process.poll() is None:
                process.send_signal(signal.SIGQUIT)
        await asyncio.sleep(1)
        raise TimeoutError(f"stack not ready after {timeout:.0f}s: {last}")


def webhook_url(value: str) -> str:
    """An absolute http(s) URL (`--webhooks-to`), else argparse's usage error."""
    where = urlsplit(value)
    if where.scheme not in ("http", "https") or not where.hostname:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an http(s) URL, e.g. http://127.0.0.1:8097/v1/webhooks/sandbox"
        )
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from services.devtools.infra.local_kafka import BROKER_CHOICES

    parser = argparse.ArgumentParser(
        prog="python -m services.devtools.stack",
        description="Run Kafka, Postgres, the sandbox provider and every recon service "
        "locally until Ctrl-C. Data persists in --dir.",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=REPO_ROOT / ".cache" / "dev",
        help="data and log directory (default: %(default)s)",
    )
    parser.add_argument("--intake-port", type=int, default=8080)
    parser.add_argument("--sandbox-port", type=int, default=8090)
    parser.add_argument("--kafka-port", type=int, default=9092)
    parser.add_argument("--pg-port", type=int, default=5432)
    parser.add_argument(
        "--brokers",
        type=int,
        choices=BROKER_CHOICES,
        default=1,
        help="Kafka nodes: 1, or a 3-node KRaft cluster with replication 3 and "
        "min.insync 2 on ports --kafka-port+2i/+2i+1 (default: %(default)s)",
    )
    parser.add_argument(
        "--webhooks-to",
        type=webhook_url,
        metavar="URL",
        help="the sandbox delivers its webhooks to URL (e.g. a sink that answers 200)"
        " instead of recon's intake: recon then confirms effects from the provider's"
        " answers alone, to measure it as a system that ingests no webhooks"
        " (default: the intake; `make run WEBHOOKS_TO=URL`; docs/benchmark.md)",
    )
    parser.add_argument(
        "--webhook-delay-ms",
        type=delivery_delay_ms,
        default=0,
        metavar="MS",
        help="each webhook's first delivery waits MS after its effect, as a real provider's"
        " delivery queue does (default: at once; `make run WEBHOOK_DELAY_MS=MS`;"
        " docs/benchmark.md)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from services.devtools.infra.local_kafka import kafka_env, local_kafka
    from services.devtools.infra.postgres import PostgresServer

    args = parse_args(argv)

    kafka = local_kafka(args.dir, args.brokers, args.kafka_port)
    postgres = PostgresServer(args.dir / "postgres", args.pg_port)
    stack = Stack(
        kafka.bootstrap,
        postgres.url,
        args.dir / "logs",
        intake_port=args.intake_port,
        sandbox_port=args.sandbox_port,
        # The topics recon creates get the cluster's durability (3 copies, 2 in sync).
        extra_env={k: v for k, v in kafka_env(kafka).items() if k != "RECON_KAFKA_BOOTSTRAP"},
        webhooks_to=args.webhooks_to,
        webhook_delay_ms=args.webhook_delay_ms,
    )
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        print("starting Postgres and Kafka ...", flush=True)
        postgres.start()
        kafka.start()
        print("migrating the database ...", flush=True)
        stack.migrate_database(echo=True)
        print("starting recon services ...", flush=True)
        stack.start_all()
        asyncio.run(stack.wait_ready())
        delayed = f", {args.webhook_delay_ms} ms late" if args.webhook_delay_ms else ""
        metrics = "\n              ".join(
            f"{name:<11} {stack.metrics_url(name)}" for name in stack.metrics_ports
        )
        print(
            f"\nrecon is up.\n  intake API  {stack.intake_url}  (API key: demo-key)\n"
            f"  console     {stack.intake_url}/console  (operator key: ops-key)\n"
            f"  sandbox     {stack.sandbox_url}  (webhooks to {stack.webhook_target}{delayed})\n"
            f"  Kafka       {kafka.bootstrap}\n"
            f"  Postgres    {postgres.url}\n  logs        {stack.log_dir}\n"
            f"  metrics     {metrics}\n\n"
            f"Try:\n{example_curl(stack.intake_url)}\n\nCtrl-C stops everything.",
            flush=True,
        )
        restarts = Restarts()
        for name in stack.processes:
            restarts.started(name, time.monotonic())
        # Services that exited, and when each is started again.
        due: dict[str, float] = {}
        while not stopping:
            now = time.monotonic()
            for name, process in stack.processes.items():
                if name not in due and process.poll() is not None:
                    delay = restarts.exited(name, now)
                    due[name] = now + delay
                    print(
                        f"!!! {name} exited ({process.returncode}); restarting it in "
                        f"{delay:.0f} s; see {stack.log_dir}/{name}.log",
                        file=sys.stderr,
                        flush=True,
                    )
            for name, at in list(due.items()):
                if now >= at:
                    del due[name]
                    stack.start(name)
                    restarts.started(name, now)
            time.sleep(0.5)
    finally:
        print("stopping ...", flush=True)
        stack.stop_all()
        kafka.stop()
        postgres.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
