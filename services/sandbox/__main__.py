"""`python -m services.sandbox`: run the sandbox provider."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import uvicorn

from services.sandbox.app import create_app
from services.sandbox.store import SandboxStore

DEFAULT_PORT = 8090
DEFAULT_DB = ".cache/sandbox.sqlite3"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m services.sandbox",
        description="Sandbox provider: payments, inventory and email stand-ins with "
        "idempotency keys, lookups and fault injection (see CONTRACT.md).",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface to bind (default %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("RECON_SANDBOX_PORT", DEFAULT_PORT)),
        help="port to listen on (default %(default)s, or $RECON_SANDBOX_PORT)",
    )
    parser.add_argument(
        "--db",
        default=os.environ.get("RECON_SANDBOX_DB", DEFAULT_DB),
        help="SQLite file holding effects and idempotency keys "
        "(default %(default)s, or $RECON_SANDBOX_DB)",
    )
    parser.add_argument(
        "--log-level", default="info", help="uvicorn log level (default %(default)s)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    app = create_app(SandboxStore(args.db))
    # A bounded graceful shutdown: `lose_response_after_commit` holds requests open on purpose,
    # and an unbounded wait for them would make the process unstoppable by SIGTERM.
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=2,
    )


if __name__ == "__main__":
    main()
