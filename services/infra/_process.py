"""Helpers shared by the broker and the database server wrappers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


class InfraError(RuntimeError):
    """A local infrastructure process could not be set up or started."""


def tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:])


def ensure_port_free(port: int, what: str) -> None:
    # Without this check a readiness probe could succeed against some other process that
    # already owns the port while our own child dies with "address already in use".
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise InfraError(f"{what}: port 127.0.0.1:{port} is already in use") from exc


def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send `sig` to the process group the child leads (it was started with a new session)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def terminate(proc: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> None:
    """Ask the child to shut down with `sig`, then SIGKILL its group after `timeout` seconds."""
    if proc.poll() is None:
        signal_group(proc, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
            proc.wait()
    # Reap anything else left in the group (e.g. a JVM helper) so ports and locks are released.
    signal_group(proc, signal.SIGKILL)
