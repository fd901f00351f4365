"""The sandbox provider as a real subprocess, started exactly as `make run` starts it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.devtools.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
# Generous: on a loaded machine (2 busy cores, a broker starting beside it) one start took
# more than 20 s; a healthy one answers in well under 10.
STARTUP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Sandbox:
    url: str
    process: subprocess.Popen[bytes]


def command(db: Path, port: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "services.devtools.sandbox",
        "--port",
        str(port),
        "--db",
        str(db),
        "--log-level",
        "warning",
        *extra,
    ]


def start_sandbox(db: Path, *extra: str) -> Sandbox:
    port = free_port()
    # Flags only: webhook settings inherited from the developer's shell would skew the tests.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECON_SANDBOX_WEBHOOK_")}
    process = subprocess.Popen(
        command(db, port, *extra), cwd=REPO_ROOT, env={**env, "PYTHONUNBUFFERED": "1"}
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sandbox exited early with code {process.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200:
                return Sandbox(url=url, process=process)
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    stop(process)
    raise RuntimeError(f"sandbox did not answer /healthz within {STARTUP_TIMEOUT_S}s")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# The contract tests' fixtures (registered in tests/conftest.py): one sandbox process and
# database per test module, and a client that disarms whatever faults a test armed.
@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    running = start_sandbox(tmp_path_factory.mktemp("sandbox") / "sandbox.sqlite3")
    yield running
    stop(running.process)


@pytest.fixture
def client(sandbox: Sandbox) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sandbox.url, timeout=10.0) as c:
        yield c
        c.delete("/v1/faults")
