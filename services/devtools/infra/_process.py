"""Helpers shared by the broker and the database server wrappers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]


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


# How long a killed group's last members may take to exit before the caller goes on anyway.
GROUP_EXIT_WAIT_S = 10.0


def group_members(pgid: int) -> list[int]:
    """The processes of group `pgid` that have not exited (a zombie has: it holds no file,
    socket or memory any more, and an orphan's zombie waits for a reaper nobody controls)."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
                state, _ppid, pgrp = stat.read().rpartition(b")")[2].split()[:3]
        except (OSError, ValueError):
            continue  # gone meanwhile
        if int(pgrp) == pgid and state != b"Z":
            members.append(int(entry.name))
    return members


def wait_group_gone(pgid: int, timeout_s: float = GROUP_EXIT_WAIT_S) -> None:
    """Wait until every process of group `pgid` has exited, after a SIGKILL to it. Reaping
    the leader is not enough: the kernel ends the other members on their own time, and a
    Postgres backend forked just before the kill still held the listening socket when the
    postmaster had been reaped (4 starts in 250 right after a kill found the port in use,
    with connections arriving; it was free 0.1 ms later). A start then failed at once, and a
    member still attached to the old shared memory makes a postmaster refuse to start."""
    deadline = time.monotonic() + timeout_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.005)


def terminate(proc: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> None:
    """Ask the child to shut down with `sig`, then SIGKILL its group after `timeout` seconds."""
    terminate_all([proc], sig, timeout)


def terminate_all(
    procs: Sequence[subprocess.Popen[bytes]], sig: signal.Signals, timeout: float
) -> None:
    """Ask every child to shut down with `sig` at once, then SIGKILL the group of any still
    running `timeout` seconds later. At once, because a shutdown mostly waits (a consumer
    leaving its group, a server closing its connections): a stack's processes stopped one
    after another took 2.5-3.5 s, the sum of those waits, for every test that starts one."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        signal_group(proc, sig)  # once: a second SIGTERM makes uvicorn skip its graceful exit
    deadline = time.monotonic() + timeout
    for proc in running:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
            proc.wait()
    # Kill anything else left in a group (e.g. a JVM helper) and wait for it to exit, so
    # ports and locks are released before anything starts again.
    for proc in procs:
        signal_group(proc, signal.SIGKILL)
    for proc in procs:
        wait_group_gone(proc.pid)


class ServerProcess:
    """The lifecycle the broker and the database share: one child process leading its own
    process group, stopped with the server's own shutdown signal, killed like a crash."""

    # The signal that asks this server for its controlled shutdown, and how long it gets.
    stop_signal: signal.Signals = signal.SIGTERM
    stop_timeout_s: float = 30.0

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (for per-process CPU accounting)."""
        return self._proc.pid if self.is_running() and self._proc is not None else None

    def start(self) -> None:
        raise NotImplementedError

    def _spawn(self, cmd: list[str], log: Path, cwd: Path, **options: Any) -> None:
        with log.open("ab") as out:
            # A new session makes the child a process-group leader, so stop()/kill() reach
            # all of it, and a terminal's Ctrl-C meant for our own foreground process does
            # not reach it behind our back.
            self._proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **options,
            )

    def stop(self) -> None:
        """Controlled shutdown; SIGKILL if the server is still up after the timeout."""
        if self._proc is not None:
            terminate(self._proc, self.stop_signal, self.stop_timeout_s)
            self._proc = None

    def kill(self) -> None:
        """Crash the server: SIGKILL its whole process group, no shutdown, no flush."""
        if self._proc is not None:
            signal_group(self._proc, signal.SIGKILL)
            self._proc.wait()
            wait_group_gone(self._proc.pid)
            self._proc = None

    def restart(self) -> None:
        self.stop()
        self.start()
