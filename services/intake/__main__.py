"""`python -m services.intake`: serve the intake API on RECON_INTAKE_HOST:PORT."""

import logging

import uvicorn

from services.config import load_settings
from services.intake.app import create_app

# How long an idle keep-alive connection stays open. It must outlast the idle expiry of the
# clients' connection pools (httpx 5 s, aiohttp 15 s, Go 90 s): with uvicorn's default of
# 5 s, equal to httpx's, the intake closed connections a client was at that moment reusing,
# and under load (a late timer on a busy loop) the close met the request in flight: a reset
# the client saw as httpx.ReadError, the intake as ClientDisconnect (issue 7, item 15).
KEEP_ALIVE_S = 120


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = load_settings()
    uvicorn.run(
        create_app(settings),
        host=settings.intake_host,
        port=settings.intake_port,
        timeout_keep_alive=KEEP_ALIVE_S,
    )


if __name__ == "__main__":
    main()
