"""The pull reconciler and the intake started while Postgres is unreachable (restarted by the
chaos runner's nemesis at that moment, found by `make chaos CHAOS_ARGS="--brokers 3"`) wait
for it instead of exiting; a database that does not exist still stops them at once.

Postgres is the session's real one; its address is a port that refuses connections until the
test opens a relay to it there."""

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from conftest import Infra
from support.intake_app import intake_settings
from support.postgres_away import via_port
from support.relay import relay

from events.topics import Topics
from services.config import Settings
from services.intake.app import create_app
from services.postgres_start import open_pool
from services.pull_reconciler.runtime import open_reconciler


async def _starts_once_postgres_answers(
    start: Coroutine[Any, Any, bool],
    caplog: pytest.LogCaptureFixture,
    port: int,
    database_url: str,
) -> bool:
    """Run `start` while Postgres is "down" (nothing answers on `port`) until its pool has
    failed at least once with it still starting, then let Postgres "come back" (a relay to
    the real server on `port`): what `start` returns once it got through."""
    starting = asyncio.create_task(start)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not any("not reachable yet" in r.getMessage() for r in caplog.records):
        assert not starting.done(), starting.exception()
        assert loop.time() < deadline, "the pool never failed"
        await asyncio.sleep(0.05)
    postgres = urlsplit(database_url)
    async with relay(port, f"{postgres.hostname}:{postgres.port}"):
        return await asyncio.wait_for(starting, 60)


async def test_the_reconciler_started_while_postgres_is_unreachable_waits_for_it(
    infra: Infra,
    fresh_database: str,
    topic_prefix: str,
    free_port: Callable[[], int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    settings = Settings(
        kafka_bootstrap=infra.kafka_bootstrap,
        database_url=via_port(fresh_database, port),
        topics=Topics(topic_prefix),
        environment="test",
    )
    caplog.set_level(logging.WARNING, logger="services.postgres_start")

    async def opened() -> bool:
        async with open_reconciler(settings) as reconciler:
            return bool(await reconciler.pool.fetchval("SELECT 1") == 1)

    assert await _starts_once_postgres_answers(opened(), caplog, port, fresh_database)


async def test_the_intake_started_while_postgres_is_unreachable_waits_for_it(
    infra: Infra,
    fresh_database: str,
    topic_prefix: str,
    free_port: Callable[[], int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    settings = await intake_settings(infra, via_port(fresh_database, port), topic_prefix)
    caplog.set_level(logging.WARNING, logger="services.postgres_start")
    app = create_app(settings)

    async def started() -> bool:
        async with app.router.lifespan_context(app):
            return bool(await app.state.pool.fetchval("SELECT 1") == 1)

    assert await _starts_once_postgres_answers(started(), caplog, port, fresh_database)


async def test_a_database_that_does_not_exist_is_refused_at_once(infra: Infra) -> None:
    missing = urlunsplit(urlsplit(infra.database_url)._replace(path="/no_such_database"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(asyncpg.InvalidCatalogNameError):
        await open_pool(missing, min_size=1, max_size=1, timeout_s=30)
    assert loop.time() - started < 10
