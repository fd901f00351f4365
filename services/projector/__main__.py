"""`python -m services.projector`: run the projector until SIGINT or SIGTERM."""

import asyncio
import logging
import signal

from projections.projector import run_projector
from services.config import load_settings


async def main() -> None:
    settings = load_settings()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await run_projector(settings, stop)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(main())
