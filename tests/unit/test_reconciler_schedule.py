"""The pull reconciler's periodic jobs (services.pull_reconciler.runtime._every) on a real
APScheduler: a failure waits for the next run, a run cut short by the stop is no error."""

import asyncio
import logging
from datetime import UTC, datetime

import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from services.pull_reconciler.runtime import _every


async def _first_run(job_body: asyncio.Event, scheduler: AsyncIOScheduler) -> None:
    scheduler.start()
    await asyncio.wait_for(job_body.wait(), timeout=5)


async def test_a_run_cut_short_by_the_stop_logs_no_error(caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()

    async def scan() -> None:
        started.set()
        await asyncio.Event().wait()  # still listing when the process stops

    scheduler = AsyncIOScheduler(timezone=UTC)
    _every(scheduler, "drift scan", scan, 60, datetime.now(UTC))
    with caplog.at_level(logging.INFO):
        await _first_run(started, scheduler)
        scheduler.shutdown(wait=False)  # what run_reconciler does at the stop
        await asyncio.sleep(0.05)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert "drift scan cut short by the stop" in caplog.messages


async def test_a_failed_run_is_logged_and_the_job_stays(caplog: pytest.LogCaptureFixture) -> None:
    ran = asyncio.Event()

    async def tick() -> None:
        ran.set()
        raise OSError("provider down")

    scheduler = AsyncIOScheduler(timezone=UTC)
    _every(scheduler, "pull tick", tick, 60, datetime.now(UTC))
    with caplog.at_level(logging.INFO):
        await _first_run(ran, scheduler)
        await asyncio.sleep(0.05)
    try:
        assert "pull tick failed; the next one retries" in caplog.messages
        assert scheduler.get_job("pull tick") is not None
    finally:
        scheduler.shutdown(wait=False)
