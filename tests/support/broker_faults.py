"""The suite's own broker made to fail under a test, and put back whatever the test did."""

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.devtools.infra import KafkaBroker


@contextmanager
def frozen(broker: KafkaBroker) -> Iterator[None]:
    """The broker stopped (SIGSTOP): it keeps its connections and takes requests, and
    answers none, as a hung broker or one behind a firewall that drops packets does, so a
    client waits each request's `request_timeout_ms` (40 s)."""
    pid = broker.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        _all_stopped(pid)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# How long the kernel may take to stop every thread of the JVM.
STOPPING_S = 5.0


def _all_stopped(pid: int) -> None:
    """Returns once each of `pid`'s threads is stopped. `kill` returns once the signal is
    queued; each thread stops on its own way back to user space. A thread still running
    could answer a request sent after the freeze, which a test then reads as the frozen
    broker answering (test_kafka_stop_frozen saw a LeaveGroup answered so, twice in CI)."""
    deadline = time.monotonic() + STOPPING_S
    while True:
        states = _thread_states(pid)
        running = {tid: state for tid, state in states.items() if state not in "TtZX"}
        if not running:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"broker threads not stopped {STOPPING_S} s after SIGSTOP: {running}"
            )
        time.sleep(0.01)


def _thread_states(pid: int) -> dict[str, str]:
    """Each thread's state letter (a thread gone meanwhile is left out)."""
    states = {task.name: _state(task / "stat") for task in Path(f"/proc/{pid}/task").iterdir()}
    return {tid: state for tid, state in states.items() if state != "unknown"}


def _state(stat: Path) -> str:
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "unknown"


def process_state(broker: KafkaBroker) -> str:
    """The broker's process state as the kernel has it (`T`: stopped, as `frozen` leaves it),
    for a test whose frozen broker seemed to answer."""
    return _state(Path(f"/proc/{broker.pid}/stat"))
