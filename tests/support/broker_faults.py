"""The suite's own broker made to fail under a test, and put back whatever the test did."""

import os
import signal
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
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def process_state(broker: KafkaBroker) -> str:
    """The broker's process state as the kernel has it (`T`: stopped, as `frozen` leaves it),
    for a test whose frozen broker seemed to answer."""
    try:
        return Path(f"/proc/{broker.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "unknown"
