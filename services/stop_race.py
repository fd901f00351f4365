"""A process's start-up raced with its stop: every wait of a start-up for a server (Kafka's
topic set-up and clients' starts, services.kafka_start; a Postgres pool, services.
postgres_start) ends as soon as the process is asked to stop (SIGTERM, services.lifecycle),
instead of sitting out the server's outage (a refused or frozen server: a minute of retries,
or 40-60 s of one request) until the orchestrator's grace runs out and it kills the process.

What a step had opened when it was cancelled is closed by the step itself or by the caller's
exit stack (services.closing), as for a step that failed."""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence


class StoppedStarting(Exception):
    """Raised by a process's start-up that `stop` cut short (topic set-up, a client's start,
    a Postgres pool): what it had opened is closed again, and nothing of it runs. A context
    that would otherwise hand out what never started (a producer every send of which fails)
    raises this instead (services.pull_reconciler.runtime.open_reconciler, the intake's
    lifespan)."""


async def unless_stopped(step: Callable[[], Awaitable[None]], stop: asyncio.Event | None) -> bool:
    """Runs `step` (a client's start, topic set-up, a pool's first connections): True once it
    ended, False if `stop` was set first (the step cancelled and awaited, so nothing of it
    runs on). An error of the step is raised, even one that came with the stop."""
    if stop is None:
        await step()
        return True
    attempt = asyncio.ensure_future(step())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((attempt, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Also when this task is cancelled: neither is left running behind it.
        attempt.cancel()
        stopped.cancel()
        await asyncio.gather(attempt, stopped, return_exceptions=True)
    if attempt.cancelled() and stop.is_set():
        return False
    attempt.result()
    return True


async def stopped_within(stop: asyncio.Event | None, delay: float) -> bool:
    """Waits `delay` s, a back-off between attempts; True as soon as `stop` is set."""
    if stop is None:
        await asyncio.sleep(delay)
        return False
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay)
    return stop.is_set()


async def retried(
    step: Callable[[], Awaitable[None]],
    stop: asyncio.Event | None,
    *,
    what: str,
    transient: Callable[[Exception], bool],
    timeout_s: float,
    backoff: Sequence[float],
    log: logging.Logger,
) -> bool:
    """Runs `step` (a Kafka client's start, a Postgres pool's first connections) until it
    ends: True. An error `transient` accepts (a server restarting, or one that is not there:
    only time tells them apart) is retried after `backoff`'s delays (its last one repeated)
    for `timeout_s`; past it, and at once for any other error, the error is raised. False
    once `stop` is set, in an attempt or a back-off: the step is not run again. The one loop
    of services.kafka_start and services.postgres_start; `log` is the caller's, `what`
    names the server (and client) in its lines."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    failures = 0
    while True:
        try:
            if not await unless_stopped(step, stop):
                return False
            if failures:
                log.info("%s started after %d failed attempts", what, failures)
            return True
        except Exception as error:
            delay = backoff[min(failures, len(backoff) - 1)]
            if not transient(error) or loop.time() + delay > deadline:
                log.error("%s cannot start: %r", what, error)
                raise
            failures += 1
            log.warning("%s not reachable yet (%r); retrying in %.1f s", what, error, delay)
        if await stopped_within(stop, delay):
            return False
