"""`make image-test`: build recon's image (compose/Dockerfile) and prove it runs: every recon
process and the sandbox as a container of that image, on the host's network, against Kafka
and Postgres started by the project's own scripts; the README's transaction is submitted and
must commit; then everything is removed.

Where no registry is reachable, `--local-base` makes the base image here: a Debian root file
system from `debootstrap --variant=minbase` (Python 3.11 and its venv module), with this
host's trust store (a TLS-inspecting proxy's CA reaches pip and uv through it), brought in
with `docker import`. `--start-dockerd` starts a Docker engine of its own (Debian's
`docker.io`), with `--iptables=false --bridge=none`: containers share the host's network, so
nothing needs a bridge or NAT.

Not the compose file: Kafka and Postgres come from the project's scripts, not images, so no
registry is needed at all; `docker compose` users pull those images (docs/operations.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from services.devtools.infra._process import REPO_ROOT
from services.devtools.infra.kafka import KafkaBroker
from services.devtools.infra.postgres import PostgresServer
from services.devtools.ports import free_port
from services.devtools.stack import MODULES
from services.intake.example import example_transaction

CACHE = REPO_ROOT / ".cache" / "image-check"
LOCAL_BASE = "recon-base:bookworm"
IMAGE = "recon:check"
DEADLINE_S = 240.0


class CheckFailed(RuntimeError):
    pass


def _docker(*args: str, quiet: bool = True) -> str:
    result = subprocess.run(["docker", *args], check=False, capture_output=quiet, text=True)
    if result.returncode != 0:
        raise CheckFailed(f"docker {' '.join(args[:3])} failed:\n{result.stderr or ''}")
    return result.stdout or ""


@contextmanager
def dockerd() -> Iterator[None]:
    """A Docker engine of our own on a socket under .cache, for the length of the check."""
    root = CACHE / "dockerd"
    root.mkdir(parents=True, exist_ok=True)
    socket = root / "docker.sock"
    cmd = ["dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none"]
    cmd += ["-H", f"unix://{socket}", "--data-root", str(root / "data")]
    cmd += ["--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid")]
    with open(root / "dockerd.log", "ab") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    os.environ["DOCKER_HOST"] = f"unix://{socket}"
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
            if process.poll() is not None or time.monotonic() > deadline:
                raise CheckFailed(f"dockerd did not start; see {root / 'dockerd.log'}")
            time.sleep(0.5)
        yield
    finally:
        process.terminate()
        process.wait(30)


def local_base() -> str:
    """The base image made here (debootstrap + docker import), once per machine."""
    if (
        subprocess.run(["docker", "image", "inspect", LOCAL_BASE], capture_output=True).returncode
        == 0
    ):
        return LOCAL_BASE
    rootfs = CACHE / "rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    subprocess.run(
        ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
         "bookworm", str(rootfs), "http://deb.debian.org/debian"],
        check=True, capture_output=True,
    )  # fmt: skip
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", rootfs / "etc/ssl/certs/ca-certificates.crt")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(["docker", "import", "-", LOCAL_BASE], stdin=tar.stdout, check=True)
    tar.wait()
    shutil.rmtree(rootfs, ignore_errors=True)
    return LOCAL_BASE


def build(base: str | None) -> None:
    args = ["build", "--network", "host", "-f", "compose/Dockerfile", "-t", IMAGE, "."]
    if base:
        args[1:1] = ["--build-arg", f"BASE_IMAGE={base}"]
    # The classic builder: BuildKit needs the buildx plugin, which Debian's docker.io lacks.
    os.environ["DOCKER_BUILDKIT"] = "0"
    subprocess.run(["docker", *args], cwd=REPO_ROOT, check=True)


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
        _commit_readme_transaction(f"http://127.0.0.1:{intake}")
        return time.monotonic() - began
    except CheckFailed:
        for name in started:
            logs = subprocess.run(["docker", "logs", "--tail", "15", name], capture_output=True)
            print(f"--- {name} ---\n{logs.stderr.decode(errors='replace')}", file=sys.stderr)
        raise
    finally:
        for name in started:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        kafka.stop()
        postgres.stop()


def _commit_readme_transaction(url: str) -> None:
    headers = {"Authorization": "Bearer demo-key"}
    deadline = time.monotonic() + DEADLINE_S
    with httpx.Client(timeout=10) as http:
        while not _healthy(http, url):
            if time.monotonic() > deadline:
                raise CheckFailed(f"the intake was not healthy within {DEADLINE_S:.0f} s")
            time.sleep(1)
        accepted = http.post(f"{url}/v1/transactions", json=example_transaction(), headers=headers)
        if accepted.status_code != 202:
            raise CheckFailed(f"submission answered {accepted.status_code}: {accepted.text}")
        while True:
            tx = http.get(f"{url}/v1/transactions/order-42", headers=headers).json()
            if tx.get("status") == "committed":
                return
            if time.monotonic() > deadline:
                raise CheckFailed(f"order-42 did not commit within {DEADLINE_S:.0f} s: {tx}")
            time.sleep(0.5)


def _healthy(http: httpx.Client, url: str) -> bool:
    try:
        return http.get(f"{url}/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.devtools.image_check")
    parser.add_argument("--local-base", action="store_true", help="debootstrap the base image")
    parser.add_argument("--start-dockerd", action="store_true", help="run a Docker engine")
    args = parser.parse_args(argv)
    began = time.monotonic()
    work = CACHE / "stack"
    shutil.rmtree(work, ignore_errors=True)
    try:
        with dockerd() if args.start_dockerd else _nothing():
            build(local_base() if args.local_base else None)
            built = time.monotonic() - began
            committed = run_stack(work)
    except (CheckFailed, subprocess.CalledProcessError) as error:
        print(f"image check failed: {error}", file=sys.stderr)
        return 1
    print(
        f"image check passed: built in {built:.0f} s, README transaction committed "
        f"{committed:.0f} s after the containers started ({time.monotonic() - began:.0f} s)"
    )
    return 0


@contextmanager
def _nothing() -> Iterator[None]:
    yield


if __name__ == "__main__":
    sys.exit(main())
