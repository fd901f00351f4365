"""SIGQUIT writes where every asyncio task of the process is waiting, one log line, and the
process carries on: a process that is alive but stuck (a consumer that never rejoined its
group, a listener awaiting a pool) is diagnosed without stopping it, as the JVM's thread
dump does. `kill -QUIT <pid>`; the stack's readiness wait sends it to every process when
it times out, so a failed test's log tails say where each one waited."""

import asyncio
import logging
from collections.abc import Iterator
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)


def _frames(awaitable: Any) -> Iterator[FrameType]:
    """The frames of an await chain, outermost first (a suspended coroutine's own frame has
    no f_back: the chain is in cr_await / gi_yieldfrom)."""
    while awaitable is not None:
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None)
        if frame is not None:
            yield frame
        awaitable = getattr(awaitable, "cr_await", None) or getattr(awaitable, "gi_yieldfrom", None)


def describe(tasks: set["asyncio.Task[Any]"]) -> str:
    """One line per task: its name, then each frame it awaits through (function file:line)."""
    lines = []
    for task in sorted(tasks, key=lambda t: t.get_name()):
        chain = " > ".join(
            f"{f.f_code.co_name} {f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_lineno}"
            for f in _frames(task.get_coro())
        )
        lines.append(f"{task.get_name()}: {chain or '(running)'}")
    return "\n".join(lines)


def dump() -> None:
    tasks = asyncio.all_tasks()
    log.warning("%d asyncio tasks (SIGQUIT):\n%s", len(tasks), describe(tasks))
