"""`make image-test`: build recon's image (compose/Dockerfile) and prove it runs: every recon
process and the sandbox as a container of that image, on the host's network, against Kafka
and Postgres started by the project's own scripts; the README's transaction is submitted and
must commit; then everything is removed.

Where no registry is reachable, `--local-base` makes the base image here (debootstrap and
`docker import`) and `--start-dockerd` starts a Docker engine of its own with no bridge:
both from services.devtools.docker_engine, which `make compose-test` shares.

Not the compose file (`make compose-test` is): Kafka and Postgres come from the project's
scripts, not images, so this check needs no Kafka or Postgres image at all.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from services.devtools import docker_engine
from services.devtools.docker_engine import DockerError, docker, engine, local_base
from services.devtools.infra._process import REPO_ROOT
from services.devtools.infra.kafka import KafkaBroker
from services.devtools.infra.postgres import PostgresServer
from services.devtools.ports import free_port
from services.devtools.readme_transaction import NotCommitted, commit_readme_transaction
from services.devtools.stack import MODULES

CACHE = REPO_ROOT / ".cache" / "image-check"
IMAGE = "recon:check"
DEADLINE_S = 240.0


class CheckFailed(RuntimeError):
    pass


def _docker(*args: str) -> str:
    try:
        return docker(*args)
    except DockerError as error:
        raise CheckFailed(str(error)) from error


def build(base: str | None) -> None:
    args = {"BASE_IMAGE": base} if base else {}
    try:
        docker_engine.build(IMAGE, REPO_ROOT / "compose" / "Dockerfile", REPO_ROOT, args)
    except DockerError as error:
        raise CheckFailed(str(error)) from error


def run_stack(work: Path) -> float:
    """Seconds from the first container's start to the README transaction's commit."""
    postgres = PostgresServer(work / "postgres", free_port())
    kafka = KafkaBroker(work / "kafka", free_port(), free_port())
    postgres.start()
    kafka.start()
    intake, sandbox = free_port(), free_port()
    env = {
        "RECON_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "RECON_DATABASE_URL": postgres.url,
        "RECON_PROVIDERS": f"sandbox=http://127.0.0.1:{sandbox}",
        "RECON_INTAKE_PORT": str(intake),
    }
    started: list[str] = []
    began = time.monotonic()
    try:
        # The compose stack's one-shot `migrate` service: the processes refuse an empty
        # database, and this also shows the image carries services/migrations.
        migrate = ["run", "--rm", "--network", "host"]
        for key, value in env.items():
            migrate += ["-e", f"{key}={value}"]
        print(_docker(*migrate, IMAGE, "python", "-m", "services.cli", "migrate"), end="")
        for name, module in MODULES.items():
            args = ["run", "-d", "--network", "host", "--name", f"recon-check-{name}"]
            for key, value in env.items():
                args += ["-e", f"{key}={value}"]
            if name == "sandbox":
                command = ["--port", str(sandbox), "--db", "/data/sandbox.db"]
                command += ["--webhook-url", f"http://127.0.0.1:{intake}/v1/webhooks/sandbox"]
            else:
                args += ["-e", f"RECON_METRICS_PORT={free_port()}"]
                command = []
            _docker(*args, IMAGE, "python", "-m", module, *command)
            started.append(f"recon-check-{name}")
        commit_readme_transaction(f"http://127.0.0.1:{intake}", DEADLINE_S)
        return time.monotonic() - began
    except (CheckFailed, NotCommitted):
        for name in started:
            logs = subprocess.run(["docker", "logs", "--tail", "15", name], capture_output=True)
            print(f"--- {name} ---\n{logs.stderr.decode(errors='replace')}", file=sys.stderr)
        raise
    finally:
        for name in started:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        kafka.stop()
        postgres.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.devtools.image_check")
    parser.add_argument("--local-base", action="store_true", help="debootstrap the base image")
    parser.add_argument("--start-dockerd", action="store_true", help="run a Docker engine")
    args = parser.parse_args(argv)
    began = time.monotonic()
    work = CACHE / "stack"
    shutil.rmtree(work, ignore_errors=True)
    try:
        with engine(start=args.start_dockerd):
            build(local_base() if args.local_base else None)
            built = time.monotonic() - began
            committed = run_stack(work)
    except (CheckFailed, DockerError, NotCommitted) as error:
        print(f"image check failed: {error}", file=sys.stderr)
        return 1
    print(
        f"image check passed: built in {built:.0f} s, README transaction committed "
        f"{committed:.0f} s after the containers started ({time.monotonic() - began:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
