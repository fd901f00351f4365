"""`python -m services.intake`: serve the intake API on RECON_INTAKE_HOST:PORT."""

import asyncio

import uvicorn

from services.config import Settings
from services.intake.app import create_app
from services.lifecycle import run_process


async def serve_intake(settings: Settings, stop: asyncio.Event) -> None:
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host=settings.intake_host, port=settings.intake_port)
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
    run_process("intake", serve_intake)
