"""stripe-mock as a subprocess on loopback (both its HTTP and HTTPS listeners on
127.0.0.1, never on every interface), built by services.devtools.infra.stripe_mock."""

import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from services.devtools.infra.stripe_mock import ensure_stripe_mock
from services.devtools.ports import free_port

STARTUP_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def stripe_mock() -> Iterator[str]:
    """The base URL of a running stripe-mock (plain HTTP)."""
    http_port, https_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            str(ensure_stripe_mock()),
            "-http-addr",
            f"127.0.0.1:{http_port}",
            "-https-addr",
            f"127.0.0.1:{https_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"stripe-mock exited early with code {process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", http_port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("stripe-mock did not listen in time") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{http_port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
