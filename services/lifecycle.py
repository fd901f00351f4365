"""Running a recon process: logging, settings, and a clean stop on SIGINT/SIGTERM."""

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

from services.config import DEFAULTS, ConfigError, Settings, load_settings
from services.event_loop import LOOPS
from services.event_loop import run as run_loop
from services.profiling import install_from_env

Main = Callable[[Settings, asyncio.Event], Awaitable[None]]


def run_process(name: str, main: Main) -> None:
    level = os.environ.get("RECON_LOG_LEVEL", DEFAULTS["RECON_LOG_LEVEL"])
    try:
        logging.basicConfig(
            level=level, format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s"
        )
    except ValueError:
        # A malformed variable stops the process like any other configuration error.
        print(
            f"{name}: configuration error: RECON_LOG_LEVEL: unknown level {level!r}",
            file=sys.stderr,
        )
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

    async def guarded() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(settings, stop)

    run_loop(guarded(), loop_name)
