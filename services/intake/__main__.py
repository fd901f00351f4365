"""`python -m services.intake`: serve the intake API on RECON_INTAKE_HOST:PORT."""

import asyncio

import uvicorn

from services.collector import tune_for_service
from services.config import Settings
from services.intake.app import create_app
from services.lifecycle import run_process

# How long an idle keep-alive connection stays open. It must outlast the idle expiry of the
# clients' connection pools (httpx 5 s, aiohttp 15 s, Go 90 s): with uvicorn's default of
# 5 s, equal to httpx's, the intake closed connections a client was at that moment reusing,
# and under load (a late timer on a busy loop) the close met the request in flight: a reset
# the client saw as httpx.ReadError, the intake as ClientDisconnect (issue 7, item 15).
KEEP_ALIVE_S = 120


async def serve_intake(settings: Settings, stop: asyncio.Event) -> None:
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host=settings.intake_host,
            port=settings.intake_port,
            timeout_keep_alive=KEEP_ALIVE_S,
            # uvicorn's own handlers would print its lines outside the process's format
            # (services.logging_json); without them they reach the root handler.
            log_config=None,
        )
    )

    async def stop_when_asked() -> None:
        # uvicorn installs its own SIGINT/SIGTERM handlers while it serves; this covers a
        # stop asked for by any other means.
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
