"""`make compose-test`: bring compose/docker-compose.yml itself up and see it work, on a machine
that reaches no image registry.

Steps, each printed with its time: a Docker engine (the environment's, else one of our own,
services.devtools.docker_engine); the local base image (debootstrap, skipped when the engine
has it); Kafka and Postgres images built from it (compose/local/: Debian's JRE with the broker
jars `make fetch` put in .cache, Debian's PostgreSQL), standing in for apache/kafka and
postgres through the compose file's KAFKA_IMAGE and POSTGRES_IMAGE; recon's image built by
docker-compose from the compose file's own build section; the stack up on the host's network
(compose/docker-compose.host.yml: the engine has no bridge, and its ports clash with neither
`make run` nor the tests); every service healthy; the README's transaction submitted and seen
committed through the API; each recon process's /metrics answering. Then `docker-compose down
-v`, whatever happened, with the logs of the services that failed printed first.

`--images-only` (`make compose-images`) builds the images and stops there, for running the
stack by hand (docs/operations.md, "Docker").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import yaml

from services.devtools import docker_engine
from services.devtools.docker_engine import DockerError, engine, local_base
from services.devtools.infra._process import REPO_ROOT, InfraError, ensure_port_free
from services.devtools.infra.kafka import ensure_kafka_jars
from services.devtools.readme_transaction import NotCommitted, commit_readme_transaction
from services.devtools.stack import SERVICES
from services.metrics import DEFAULT_PORTS

COMPOSE = REPO_ROOT / "compose"
SOURCES = ("-f", f"{COMPOSE}/docker-compose.yml", "-f", f"{COMPOSE}/docker-compose.host.yml")
WORK = REPO_ROOT / ".cache" / "compose-check"
# The two files merged, less the published ports (render()): what every command here uses.
RENDERED = WORK / "docker-compose.yml"
FILES = ("-f", str(RENDERED))
PROJECT = "recon-compose-test"
KAFKA_IMAGE = "recon-kafka:local"
POSTGRES_IMAGE = "recon-postgres:local"
# Prometheus and Grafana need images this machine cannot build; every other service runs.
STARTED = ("kafka", "postgres", *SERVICES)

UP_S = 420.0  # docker-compose up -d waits for Kafka and Postgres to be healthy on its own
HEALTHY_S = 300.0
COMMIT_S = 240.0
DOWN_S = 180.0


class CheckFailed(RuntimeError):
    pass


@contextmanager
def step(name: str) -> Iterator[None]:
    began = time.monotonic()
    print(f"[compose-test] {name} ...", flush=True)
    yield
    print(f"[compose-test] {name}: done in {time.monotonic() - began:.0f} s", flush=True)


def compose_env() -> dict[str, str]:
    return {
        **docker_engine.classic_builder_env(),
        "RECON_BASE_IMAGE": docker_engine.LOCAL_BASE,
        "KAFKA_IMAGE": KAFKA_IMAGE,
        "POSTGRES_IMAGE": POSTGRES_IMAGE,
    }


def compose(*args: str, timeout: float, quiet: bool = False) -> str:
    cmd = ["docker-compose", "-p", PROJECT, *FILES, *args]
    try:
        result = subprocess.run(
            cmd, env=compose_env(), timeout=timeout, check=False, text=True,
            capture_output=quiet, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"docker-compose {args[0]} did not finish in {timeout:.0f} s") from exc
    if result.returncode != 0:
        raise CheckFailed(
            f"docker-compose {' '.join(args)} failed ({result.returncode})"
            + (f":\n{result.stderr}" if quiet else "; its output is above")
        )
    return result.stdout or ""


def render() -> None:
    """Merge the compose file with its host-network file, and drop the published ports of
    the services on the host's network: docker-compose 1.29 refuses to create a container
    with both ("host" network_mode is incompatible with port_bindings), and 1.29 has no way
    for a second file to remove a list the first one set. Nothing else changes."""
    cmd = ["docker-compose", "-p", PROJECT, *SOURCES, "config"]
    result = subprocess.run(cmd, env=compose_env(), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise CheckFailed(f"docker-compose config refused the compose files:\n{result.stderr}")
    merged = yaml.safe_load(result.stdout)
    for service in merged["services"].values():
        if service.get("network_mode") == "host":
            service.pop("ports", None)
    WORK.mkdir(parents=True, exist_ok=True)
    RENDERED.write_text(yaml.safe_dump(merged, sort_keys=False))


def host_ports() -> dict[str, int]:
    """Each service's port on the host, read from the host-network file (its one source)."""
    services: dict[str, Any] = yaml.safe_load((COMPOSE / "docker-compose.host.yml").read_text())[
        "services"
    ]
    ports: dict[str, int] = {}
    for listener in services["kafka"]["environment"]["KAFKA_LISTENERS"].split(","):
        name, _, address = listener.partition("://")
        ports[f"kafka {name.lower()}"] = int(address.rsplit(":", 1)[1])
    ports["postgres"] = int(services["postgres"]["environment"]["PGPORT"])
    sandbox = services["sandbox"]["command"]
    ports["sandbox"] = int(sandbox[sandbox.index("--port") + 1])
    for name in DEFAULT_PORTS:
        env = services[name]["environment"]
        ports[f"{name} metrics"] = int(env["RECON_METRICS_PORT"])
        if "RECON_INTAKE_PORT" in env:
            ports[name] = int(env["RECON_INTAKE_PORT"])
    return ports


def build_images() -> None:
    with step("base image (debootstrap, skipped when the engine has it)"):
        base = local_base()
    with step(f"Kafka image {KAFKA_IMAGE}"):
        context = WORK / "kafka"
        shutil.rmtree(context, ignore_errors=True)
        shutil.copytree(COMPOSE / "local" / "kafka", context)
        shutil.copytree(ensure_kafka_jars(), context / "libs")
        docker_engine.build(KAFKA_IMAGE, context / "Dockerfile", context, {"BASE_IMAGE": base})
    with step(f"Postgres image {POSTGRES_IMAGE}"):
        folder = COMPOSE / "local" / "postgres"
        docker_engine.build(POSTGRES_IMAGE, folder / "Dockerfile", folder, {"BASE_IMAGE": base})
    with step("recon image recon:dev (docker-compose build)"):
        # One service builds it; every recon service names the same image.
        compose("build", "sandbox", timeout=docker_engine.BUILD_S)


def run_stack() -> None:
    ports = host_ports()
    with step("ports free"):
        for what, port in ports.items():
            ensure_port_free(port, f"compose-test's {what} (compose/docker-compose.host.yml)")
    try:
        with step(f"docker-compose up -d ({len(STARTED)} services)"):
            compose("up", "-d", "--no-build", *STARTED, timeout=UP_S)
        with step("every service healthy"):
            wait_healthy()
        with step("README transaction committed"):
            commit_readme_transaction(f"http://127.0.0.1:{ports['intake']}", COMMIT_S)
        with step("metrics reachable"):
            check_metrics(ports)
    except (CheckFailed, NotCommitted, DockerError):
        print_failing_logs()
        raise


def containers() -> dict[str, dict[str, Any]]:
    """Each started service's container state, by service name."""
    ids = compose("ps", "-q", timeout=60, quiet=True).split()
    if not ids:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for item in json.loads(docker_engine.docker("inspect", *ids)):
        service = item["Config"]["Labels"].get("com.docker.compose.service", item["Name"])
        found[service] = {**item["State"], "RestartCount": item.get("RestartCount", 0)}
    return found


def _health(states: dict[str, dict[str, Any]], name: str) -> str:
    return str(states.get(name, {}).get("Health", {}).get("Status", "-"))


def wait_healthy() -> None:
    deadline = time.monotonic() + HEALTHY_S
    while True:
        states = containers()
        waiting = sorted(name for name in STARTED if _health(states, name) != "healthy")
        if not waiting:
            return
        # The recon services restart when they exit (restart: unless-stopped): a service
        # that did twice is crashing, not starting slowly.
        crashed = [
            name for name in waiting
            if states.get(name, {}).get("Status") in ("exited", "dead")
            or states.get(name, {}).get("RestartCount", 0) >= 2
        ]  # fmt: skip
        if crashed:
            raise CheckFailed(f"exited or restarting: {', '.join(crashed)}")
        if time.monotonic() > deadline:
            raise CheckFailed(f"not healthy within {HEALTHY_S:.0f} s: {', '.join(waiting)}")
        time.sleep(2)


def check_metrics(ports: dict[str, int]) -> None:
    with httpx.Client(timeout=10) as http:
        for name in DEFAULT_PORTS:
            url = f"http://127.0.0.1:{ports[f'{name} metrics']}/metrics"
            try:
                answer = http.get(url)
            except httpx.HTTPError as exc:
                raise CheckFailed(f"{name}'s metrics at {url}: {exc}") from exc
            if answer.status_code != 200 or "recon_" not in answer.text:
                raise CheckFailed(f"{name}'s metrics at {url} answered {answer.status_code}")


def print_failing_logs() -> None:
    """The logs of services that are not healthy; of every service if all look healthy."""
    try:
        states = containers()
    except (CheckFailed, DockerError) as error:
        print(f"[compose-test] could not list the containers: {error}", file=sys.stderr)
        return
    failing = [name for name in STARTED if _health(states, name) != "healthy"] or list(STARTED)
    for name in failing:
        state = states.get(name, {})
        print(
            f"--- {name}: {state.get('Status', 'not created')}, health {_health(states, name)} ---",
            file=sys.stderr,
            flush=True,
        )
        if state:
            subprocess.run(
                ["docker-compose", "-p", PROJECT, *FILES, "logs", "--no-color", "--tail=40", name],
                env=compose_env(), timeout=60, check=False, stdin=subprocess.DEVNULL,
                stdout=sys.stderr,
            )  # fmt: skip


def tear_down() -> None:
    with step("docker-compose down -v"):
        compose("down", "-v", "--remove-orphans", timeout=DOWN_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.devtools.compose_check")
    parser.add_argument(
        "--images-only", action="store_true", help="build the images and stop (make compose-images)"
    )
    parser.add_argument(
        "--start-dockerd", action="store_true",
        help="start a dockerd of our own even if the environment's answers",
    )  # fmt: skip
    args = parser.parse_args(argv)
    for tool in ("docker", "docker-compose"):
        if shutil.which(tool) is None:
            print(f"compose-test: `{tool}` is missing (apt-get install docker.io docker-compose)")
            return 1
    began = time.monotonic()
    try:
        with ExitStack() as stack:
            with step("Docker engine"):
                stack.enter_context(engine(start=True if args.start_dockerd else None))
            render()
            if args.images_only:
                build_images()
                print(f"images built on {os.environ.get('DOCKER_HOST', 'the default engine')}")
                return 0
            # A stack an interrupted run left behind holds the ports and volumes.
            with step("leftovers of an earlier run removed"):
                compose("down", "-v", "--remove-orphans", timeout=DOWN_S, quiet=True)
            try:
                build_images()
                run_stack()
            finally:
                tear_down()
    except (CheckFailed, DockerError, NotCommitted, InfraError) as error:
        took = time.monotonic() - began
        print(f"compose-test FAILED after {took:.0f} s: {error}", file=sys.stderr)
        return 1
    print(f"compose-test passed in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
