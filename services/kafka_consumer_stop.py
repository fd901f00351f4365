"""aiokafka: a consumer's `stop()` does not raise the cancellation of aiokafka's own tasks,
and closes its connections whatever they were doing.

aiokafka (0.14.0, uv.lock) stops a consumer's background tasks by cancelling each and
awaiting it. A task that catches its cancellation ends quietly; one that does not, or one
cancelled before it ever ran (its coroutine never entered, so nothing can catch it), ends
cancelled, and awaiting it raises `CancelledError` in `stop()`'s caller, which was not
cancelled at all (aiokafka issue #647). `stop()` then skips its remaining steps: the
other tasks, and the client's close, which ends its connections and metadata task.
`_closed` is already set, so a second `stop()` does nothing: the consumer stays open for
the life of the process, and a caller that reads the `CancelledError` as its own
cancellation gives up what it was doing (a process's shutdown, a partition's hand-off).
Two places do it:

- `Fetcher.close` awaits each fetch in flight after cancelling it. A fetch that failed
  (the broker slow past `request_timeout_ms`, a connection reset: `RequestTimedOutError`)
  sleeps its `retry_backoff_ms` in an `except KafkaError` branch that does not catch the
  cancellation (fetcher.py:747-755). Seen in a clean-clone CI run: the intake's progress
  reader's stop raised out of `GroupWatch.close` on a loaded machine.
- `NoGroupCoordinator.close` (a consumer with no group: `assign`, recon's log readers)
  cancels its reset task, which catches its cancellation once running but not before:
  a stop right after the start meets it (services/cli's log readers, `audit verify
  --workers` with nothing to read).

`install()` replaces both closes with ones that cancel every task first, then await each,
taking a task's own cancellation as its end; the caller's cancellation (`cancelling()` of
the task running the stop) is raised as before. tests/integration/test_kafka_consumer_stop.py.
Installed in every process by services.kafka_mends.
"""

import asyncio
from typing import TYPE_CHECKING, Any

# aiokafka is imported by install(), not here: services.kafka_mends installs this as
# aiokafka's own import ends, and this module imported first would begin that import
# half-initialised itself (a circular import).
if TYPE_CHECKING:
    from aiokafka.consumer.fetcher import Fetcher
    from aiokafka.consumer.group_coordinator import NoGroupCoordinator


async def ended(task: "asyncio.Future[Any]") -> None:
    """Awaits `task`, which its owner cancelled: its cancellation is its end, not the
    caller's; the caller's own cancellation is raised."""
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise


async def _fetcher_close(self: "Fetcher") -> None:
    self._closed = True
    self._fetch_task.cancel()
    await ended(self._fetch_task)
    # Fail all pending fetchone/fetchall calls (aiokafka's own step).
    for waiter in self._fetch_waiters:
        self._notify(waiter)
    pending = list(self._pending_tasks)
    for task in pending:
        task.cancel()
    for task in pending:
        await ended(task)


async def _no_group_close(self: "NoGroupCoordinator") -> None:
    self._reset_committed_task.cancel()
    await ended(self._reset_committed_task)
    self._reset_committed_task = None


def install() -> None:
    """Idempotent; for the whole process (every aiokafka consumer in it)."""
    from aiokafka.consumer.fetcher import Fetcher
    from aiokafka.consumer.group_coordinator import NoGroupCoordinator

    Fetcher.close = _fetcher_close
    NoGroupCoordinator.close = _no_group_close


def installed() -> bool:
    from aiokafka.consumer.fetcher import Fetcher
    from aiokafka.consumer.group_coordinator import NoGroupCoordinator

    return Fetcher.close is _fetcher_close and NoGroupCoordinator.close is _no_group_close
