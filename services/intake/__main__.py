"""`python -m services.intake`: serve the intake API on RECON_INTAKE_HOST:PORT."""

import logging

import uvicorn

from services.config import load_settings
from services.intake.app import create_app


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = load_settings()
    uvicorn.run(create_app(settings), host=settings.intake_host, port=settings.intake_port)


if __name__ == "__main__":
    main()
