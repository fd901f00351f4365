"""A process asked to stop while its start-up waits for Postgres stops at once, with the
status of any clean stop (services.postgres_start races the pool's attempts and its back-off
with the stop, services.stop_race): the intake, the pull reconciler and the intents reader,
and every database process's schema check (services.lifecycle), which waited out the
minute's retries (refused) or a 60 s connect timeout an attempt (frozen), then exited with
the error, until stop 56.

Postgres away two ways on a port of the test's own (support.postgres_away): refused (nothing
listens: the back-off between attempts) and frozen (the connection taken, nothing answered:
an attempt under way)."""

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import Infra
from support.intake_app import intake_settings
from support.postgres_away import frozen_postgres, via_port
from support.stop_timing import WAITING_S, sigterm_exits_cleanly, stopped_while_waiting

from services.config import Settings
from services.devtools.stack import Stack
from services.intake.__main__ import serve_intake
from services.intake.kafka_intents import run_intents
from services.projector.runtime import Projector
from services.pull_reconciler.runtime import run_reconciler

pytestmark = pytest.mark.timeout(180)

# A cancelled connect and the closes of what never connected take ms.
STOP_BOUND_S = 5.0

Run = Callable[[Settings, asyncio.Event], Coroutine[Any, Any, None]]


async def _projector(settings: Settings, stop: asyncio.Event) -> None:
    await Projector(settings, stop).run()


PROCESSES: dict[str, Run] = {
    "intake": serve_intake,
    "projector": _projector,
    "reconciler": run_reconciler,
    "intents reader": run_intents,
}


@asynccontextmanager
async def _postgres_away(
    how: str, port: int, failed: Callable[[], bool]
) -> AsyncIterator[asyncio.Event]:
    """Postgres `how` ("refused", "frozen") on `port`; the event is set once the process
    waits for it (frozen: its first connection taken; refused: `failed()` true)."""
    away = asyncio.Event()
    if how == "frozen":
        async with frozen_postgres(port, away):
            yield away
        return

    async def watch() -> None:
        while not failed():
            await asyncio.sleep(0.05)
        away.set()

    watcher = asyncio.create_task(watch())
    try:
        yield away
    finally:
        watcher.cancel()


@pytest.fixture
async def settings_away(
    infra: Infra, fresh_database: str, topic_prefix: str, free_port: Callable[[], int]
) -> tuple[Settings, int]:
    """A process's settings with Postgres at a port of its own (returned), the intake's too."""
    port = free_port()
    settings = await intake_settings(infra, via_port(fresh_database, port), topic_prefix)
    return dataclasses.replace(settings, intake_port=free_port()), port


@pytest.mark.parametrize("how", ["refused", "frozen"])
@pytest.mark.parametrize("process", sorted(PROCESSES))
async def test_a_process_stopped_while_it_waits_for_postgres_at_start_stops_at_once(
    process: str,
    how: str,
    settings_away: tuple[Settings, int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings, port = settings_away
    caplog.set_level(logging.WARNING, logger="services.postgres_start")

    def failed() -> bool:
        return any("not reachable yet" in r.getMessage() for r in caplog.records)

    stop = asyncio.Event()
    async with _postgres_away(how, port, failed) as away:
        task = asyncio.create_task(PROCESSES[process](settings, stop))
        try:
            await stopped_while_waiting(task, stop, away, STOP_BOUND_S, f"{process} ({how})")
            task.result()
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 90)


@pytest.mark.parametrize("how", ["refused", "frozen"])
async def test_a_database_process_sent_sigterm_while_it_waits_for_postgres_exits_cleanly(
    how: str, settings_away: tuple[Settings, int], tmp_path: Path
) -> None:
    """The intake as its own process: its first wait for Postgres is the schema check every
    database process makes before its own start (services.lifecycle). SIGTERM there exits
    with status 0, as a stop anywhere later in the start-up does."""
    settings, port = settings_away
    stack = Stack(
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=settings.database_url,
        log_dir=tmp_path / "logs",
        topic_prefix=settings.topics.prefix,
        intake_port=settings.intake_port,
        migrate=False,
    )
    async with _postgres_away(
        how, port, lambda: "not reachable yet" in stack.log_tail("intake")
    ) as away:
        process = stack.start("intake")
        try:
            await asyncio.wait_for(away.wait(), 60)
            await asyncio.sleep(WAITING_S)
            assert process.poll() is None, stack.log_tail("intake")
            await sigterm_exits_cleanly(
                process, STOP_BOUND_S, f"intake process ({how})", lambda: stack.log_tail("intake")
            )
        finally:
            stack.stop_all()
