"""aiokafka: an offset commit its caller gave up is read when it ends, not left to asyncio's
ERROR "Task exception was never retrieved".

aiokafka (0.14.0, uv.lock) sends a group's offset commit under `asyncio.shield(self.
_do_commit_offsets(...))` (`GroupCoordinator.commit_offsets`), so that a caller's
cancellation does not cut the request off. recon gives a commit up past its bound (the
at-least-once consumers' COMMIT_TIMEOUT_S, the decider's lag marker, PendingOffsets.commit's
timeout), and on Python 3.11 the cancelled shield takes its callback off the request's task:
the request runs on, and whatever it ends with (the consumer's connections closed at its
stop, the broker back with an error) is read by nobody. When the task is collected, asyncio
logs "Task exception was never retrieved ... KafkaConnectionError('Connection at ...
closed')" at ERROR with a traceback, a second or minutes after the stop said what it gave up
(`offsets of N partitions not committed at the stop (...); the next owner reads them again
from the last committed offsets`): read at 3 a.m., a crash that did not happen.

`install()` makes the request a task whose end is read by a callback, logged at DEBUG: the
caller that gave it up has already said, at WARNING or INFO, what that means (the offsets
still pending, sent with the next commit or read again by the next owner), so once is
enough. A caller that awaits the commit gets its error as before: reading a task's
exception does not take it from those that await it. tests/fault/test_clean_stop_frozen.py.
Installed in every process by services.kafka_mends.
"""

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Request = Callable[[Any, Any, Any], Any]


def _read_at_its_end(request: Request) -> Request:
    """aiokafka's `_do_commit_offsets` (`request`), run as a task whose end is read."""

    def sent(self: Any, assignment: Any, offsets: Any) -> "asyncio.Task[None]":
        task: asyncio.Task[None] = asyncio.ensure_future(request(self, assignment, offsets))
        task.add_done_callback(_read)
        return task

    sent.reads_its_end = True  # type: ignore[attr-defined]
    return sent


def _read(request: "asyncio.Task[None]") -> None:
    if request.cancelled():
        return
    error = request.exception()
    if error is not None:
        log.debug("an offset commit ended with %r (its caller may have given it up)", error)


def install() -> None:
    """Idempotent; for the whole process (every aiokafka group consumer in it). aiokafka is
    imported here, not at the top: services.kafka_mends installs this as its import ends."""
    from aiokafka.consumer.group_coordinator import GroupCoordinator

    if not installed():
        GroupCoordinator._do_commit_offsets = _read_at_its_end(GroupCoordinator._do_commit_offsets)


def installed() -> bool:
    from aiokafka.consumer.group_coordinator import GroupCoordinator

    return getattr(GroupCoordinator._do_commit_offsets, "reads_its_end", False) is True
