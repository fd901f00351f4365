"""How long a process (a task) took to end once asked to stop, and that it did within its
bound: printed, so a run shows the time beside the verdict."""

import asyncio
import time
from typing import Any


async def ended_within(task: "asyncio.Future[Any]", bound_s: float, what: str) -> None:
    """Call right after asking `task` to stop; its result (or error) is left to the caller."""
    asked = time.monotonic()
    await asyncio.wait({task}, timeout=bound_s)
    print(f"{what}: ended {time.monotonic() - asked:.3f} s after the stop was asked")
    assert task.done(), f"{what}: still running {bound_s} s after the stop was asked"


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
