"""How long a process (a task) took to end once asked to stop, and that it did within its
bound: printed, so a run shows the time beside the verdict."""

import asyncio
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

from services.devtools.infra._process import signal_group


async def ended_within(task: "asyncio.Future[Any]", bound_s: float, what: str) -> None:
    """Call right after asking `task` to stop; its result (or error) is left to the caller."""
    asked = time.monotonic()
    await asyncio.wait({task}, timeout=bound_s)
    print(f"{what}: ended {time.monotonic() - asked:.3f} s after the stop was asked")
    assert task.done(), f"{what}: still running {bound_s} s after the stop was asked"


async def cancelled_while_stopping(
    stopping: Awaitable[None], bound_s: float, held: Callable[[], str] = lambda: ""
) -> None:
    """`stopping` (a client's stop, held by a frozen broker) run by a caller that is then
    cancelled (a timeout around it, its own stop): the caller ended within `bound_s` of
    its cancel, cancelled. What the stop must not leave running is the test's to check;
    `held()` says why a stop the broker should hold ended before the cancel."""
    caller = asyncio.ensure_future(stopping)
    await asyncio.sleep(1.0)  # inside aiokafka's stop, waiting for the broker
    assert not caller.done(), f"the stop ended before its caller was cancelled: {caller} {held()}"
    caller.cancel()
    await ended_within(caller, bound_s, "the cancelled caller")
    assert caller.cancelled(), caller


# How long a start waits for the broker before the stop: long enough to be inside it.
WAITING_S = 1.0


async def stopped_while_waiting(
    task: "asyncio.Future[Any]", stop: asyncio.Event, away: asyncio.Event, bound_s: float, what: str
) -> None:
    """Once the broker is away (`away` set), and WAITING_S later, `stop` set while `task`
    still runs, and the task ended within `bound_s` of it."""
    await asyncio.wait_for(away.wait(), 60)
    await asyncio.sleep(WAITING_S)
    assert not task.done(), task
    stop.set()
    await ended_within(task, bound_s, what)


async def sigterm_exits_cleanly(
    process: "subprocess.Popen[bytes]", bound_s: float, what: str, log: Callable[[], str]
) -> None:
    """`process` sent SIGTERM, and exited within `bound_s` with status 0, a clean stop's;
    `log()`, its log's end, says why not."""
    signal_group(process, signal.SIGTERM)
    asked = time.monotonic()
    code = await asyncio.to_thread(_exit_code, process, bound_s)
    print(f"{what}: exited {time.monotonic() - asked:.3f} s after SIGTERM")
    assert code is not None, f"{what}: still running {bound_s} s after SIGTERM"
    assert code == 0, f"{what}: exit status {code}\n{log()}"


def _exit_code(process: "subprocess.Popen[bytes]", timeout: float) -> int | None:
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
