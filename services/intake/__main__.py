"""`python -m services.intake`: serve the intake API on RECON_INTAKE_HOST:PORT."""

import asyncio
import logging
import math

import uvicorn
from fastapi import FastAPI

from services.collector import tune_for_service
from services.config import Settings
from services.intake.app import create_app
from services.intake.produce import DELIVERY_BOUND_S
from services.lifecycle import run_process
from services.stop_race import StoppedStarting

# How long an idle keep-alive connection stays open. It must outlast the idle expiry of the
# clients' connection pools (httpx 5 s, aiohttp 15 s, Go 90 s): with uvicorn's default of
# 5 s, equal to httpx's, the intake closed connections a client was at that moment reusing,
# and under load (a late timer on a busy loop) the close met the request in flight: a reset
# the client saw as httpx.ReadError, the intake as ClientDisconnect (issue 7, item 15).
KEEP_ALIVE_S = 120
# At a stop, what the requests in flight are given to end; uvicorn then cancels those left
# (their clients see the connection closed, an outcome they cannot tell from a crash's, so
# they ask again: a submission by its tx_id, a webhook by its delivery id). uvicorn's own
# default waits for them without a bound, and a request whose body never comes (a client
# stalled mid-upload, or a slow sender on purpose) held the intake's stop until the
# orchestrator's grace ran out. A request waiting on Kafka knows its record's fate within
# DELIVERY_BOUND_S, so every request that can end does within this.
REQUESTS_STOP_S = math.ceil(DELIVERY_BOUND_S) + 2

log = logging.getLogger(__name__)


async def serve_intake(settings: Settings, stop: asyncio.Event) -> None:
    app = create_app(settings, stop)
    # The lifespan is run here, around the server, not by uvicorn: uvicorn runs an app's
    # start-up to its end whatever the process is asked meanwhile (its SIGINT/SIGTERM
    # handlers only mark the server for exit, read once the start-up is over), and a
    # start-up that raises is an ERROR with its traceback and exit status 3. Before uvicorn
    # installs its handlers, SIGTERM sets `stop` (services.lifecycle), which the start-up
    # races where it waits for Kafka: a stop then ends it at once, the port never bound.
    try:
        async with app.router.lifespan_context(app):
            await _serve(app, settings, stop)
    except StoppedStarting as stopped:
        log.info("intake stopped %s: nothing served", stopped)


async def _serve(app: FastAPI, settings: Settings, stop: asyncio.Event) -> None:
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=settings.intake_host,
            port=settings.intake_port,
            timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=REQUESTS_STOP_S,
            # uvicorn's own handlers would print its lines outside the process's format
            # (services.logging_json); without them they reach the root handler.
            log_config=None,
            lifespan="off",  # serve_intake runs it
        )
    )

    async def stop_when_asked() -> None:
        # uvicorn installs its own SIGINT/SIGTERM handlers while it serves; this covers a
        # stop asked for by any other means (or during the start-up, before them).
        await stop.wait()
        server.should_exit = True

    watcher = asyncio.create_task(stop_when_asked())
    try:
        await server.serve()
    finally:
        watcher.cancel()


if __name__ == "__main__":
    # The process's collector, not serve_intake's (a test serves the app in its own
    # process): with CPython's defaults it took 6-8 % of the intake's CPU at c30, walking
    # the requests' short-lived models and dicts that reference counting frees anyway
    # (docs/benchmark.md, "The decider's garbage collection").
    tune_for_service()
    run_process("intake", serve_intake, database=True)
