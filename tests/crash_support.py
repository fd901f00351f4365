"""Starting one recon process armed to pause at a crash point (services/crash_points.py),
and waiting until it is held there."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from services.crash_points import PAUSE_AT_ENV, PAUSE_FILE_ENV
from services.stack import Stack


def start_paused_at(stack: Stack, service: str, point: str, marker: Path) -> None:
    """(Re)start `service` armed to hold at `point`; the rest of the stack stays unarmed."""
    if service in stack.processes:
        stack.stop(service)
    marker.unlink(missing_ok=True)
    stack.extra_env.update({PAUSE_AT_ENV: point, PAUSE_FILE_ENV: str(marker)})
    try:
        stack.start(service)
    finally:
        # Only this process got the arming: restarts and other processes run normally.
        del stack.extra_env[PAUSE_AT_ENV], stack.extra_env[PAUSE_FILE_ENV]


async def wait_paused(stack: Stack, name: str, marker: Path, timeout: float = 60) -> None:
    """Until `name` holds at its pause point (it wrote `marker`)."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(marker.exists):
        process = stack.processes[name]
        assert process.poll() is None, f"{name} exited:\n{stack.log_tail(name)}"
        assert time.monotonic() < deadline, f"{name} never reached its pause point"
        await asyncio.sleep(0.05)


async def wait_for_log(stack: Stack, name: str, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in stack.log_tail(name, 100_000):
        assert time.monotonic() < deadline, f"{name} never logged {text!r}"
        await asyncio.sleep(0.1)
