"""Running a recon process: logging, settings, a clean stop on SIGINT/SIGTERM, and where
every task waits on SIGQUIT (services.task_dump)."""

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

from services import kafka_security, metrics, task_dump
from services.config import DEFAULTS, ConfigError, Settings, load_settings
from services.event_loop import LOOPS
from services.event_loop import run as run_loop
from services.logging_json import configure_logging
from services.migrate import SchemaBehind, require_current
from services.postgres_start import open_pool
from services.profiling import install_from_env
from services.stop_race import StoppedStarting
from services.tracing import configure_tracing

log = logging.getLogger(__name__)

Main = Callable[[Settings, asyncio.Event], Awaitable[None]]


async def _require_schema(database_url: str, stop: asyncio.Event) -> None:
    pool = await open_pool(database_url, stop=stop, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            await require_current(conn)
    finally:
        await pool.close()


def run_process(
    name: str, main: Main, *, database: bool | Callable[[Settings], bool] = False
) -> None:
    """Run `main` as the process `name`; `database`: it reads or writes Postgres (or, called
    with the settings, says whether it does), so it starts only on a database at the code's
    schema version (services.migrate)."""
    level = os.environ.get("RECON_LOG_LEVEL", DEFAULTS["RECON_LOG_LEVEL"])
    fmt = os.environ.get("RECON_LOG_FORMAT", DEFAULTS["RECON_LOG_FORMAT"])
    try:
        configure_logging(name, level, fmt)
    except ValueError as error:
        # A malformed variable stops the process like any other configuration error.
        message = str(error) if "RECON_" in str(error) else f"RECON_LOG_LEVEL: {error}"
        print(f"{name}: configuration error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        configure_tracing(
            name, os.environ.get("RECON_TRACE_EXPORTER", DEFAULTS["RECON_TRACE_EXPORTER"])
        )
    except ValueError as error:
        print(f"{name}: configuration error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        settings = load_settings()
    except ConfigError as error:
        print(f"{name}: configuration error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    install_from_env()
    loop_name = os.environ.get("RECON_EVENT_LOOP", DEFAULTS["RECON_EVENT_LOOP"])
    if loop_name not in LOOPS:
        print(
            f"{name}: configuration error: RECON_EVENT_LOOP: {loop_name!r} is not one of {LOOPS}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    metrics.serve(name, settings)

    async def guarded() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGQUIT, task_dump.dump)
        security = kafka_security.configured()
        if security.protocol != "PLAINTEXT":
            # Without it a refused login would be a client retrying forever, logged as an
            # unreachable broker; with it, the operator reads what to fix.
            try:
                await kafka_security.probe(settings.kafka_bootstrap, security)
            except kafka_security.KafkaAccessDenied as error:
                print(f"{name}: Kafka access denied: {error}", file=sys.stderr)
                raise SystemExit(2) from None
        if database(settings) if callable(database) else database:
            # A process never changes the schema (its role may not); on a database behind
            # it stops here, naming the command, rather than failing on a missing column.
            try:
                await _require_schema(settings.database_url, stop)
            except SchemaBehind as error:
                print(f"{name}: {error}", file=sys.stderr)
                raise SystemExit(2) from None
            except StoppedStarting as stopped:
                # Asked to stop while Postgres was away: a clean stop, as in any later
                # wait of the start-up (status 0), not the minute's retries then the error.
                log.info("%s stopped %s: nothing ran", name, stopped)
                return
        await main(settings, stop)

    run_loop(guarded(), loop_name)
