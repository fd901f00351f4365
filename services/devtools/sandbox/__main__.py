"""`python -m services.devtools.sandbox`: run the sandbox provider."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import uvicorn

from reconcilers.signatures import Scheme
from services.devtools.sandbox.app import create_app
from services.devtools.sandbox.faults import FaultBoard
from services.devtools.sandbox.outbound import WebhookSender
from services.devtools.sandbox.store import SandboxStore
from services.devtools.sandbox.webhook_config import (
    DEFAULT_SECRET,
    WebhookConfig,
    WebhookConfigError,
    delivery_delay_ms,
    parse_scheme,
)
from services.devtools.sandbox.webhook_outbox import WebhookOutbox, delivery_enqueuer

DEFAULT_PORT = 8090
DEFAULT_DB = ".cache/sandbox.sqlite3"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m services.devtools.sandbox",
        description="Sandbox provider: payments, inventory and email stand-ins with "
        "idempotency keys, lookups and fault injection (see docs/contract.md).",
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
    parser.add_argument(
        "--webhook-url",
        default=os.environ.get("RECON_SANDBOX_WEBHOOK_URL") or None,
        help="where to POST a signed webhook for every effect, e.g. "
        "http://127.0.0.1:8080/v1/webhooks/sandbox (default: none, no webhooks; "
        "or $RECON_SANDBOX_WEBHOOK_URL)",
    )
    parser.add_argument(
        "--webhook-secret",
        default=os.environ.get("RECON_SANDBOX_WEBHOOK_SECRET", DEFAULT_SECRET),
        help="signing secret, whsec_<base64 key> (default: the development secret of "
        "docs/contract.md, or $RECON_SANDBOX_WEBHOOK_SECRET)",
    )
    parser.add_argument(
        "--webhook-scheme",
        default=os.environ.get("RECON_SANDBOX_WEBHOOK_SCHEME", Scheme.STANDARD.value),
        help="signature scheme, standard (Standard Webhooks) or stripe "
        "(default %(default)s, or $RECON_SANDBOX_WEBHOOK_SCHEME)",
    )
    parser.add_argument(
        "--webhook-delay-ms",
        type=delivery_delay_ms,
        default=os.environ.get("RECON_SANDBOX_WEBHOOK_DELAY_MS", "0"),
        metavar="MS",
        help="each webhook's first delivery waits MS after its effect, as a real provider's"
        " delivery queue does (default %(default)s: at once; or"
        " $RECON_SANDBOX_WEBHOOK_DELAY_MS; docs/benchmark.md)",
    )
    args = parser.parse_args(argv)
    if args.webhook_delay_ms and args.webhook_url is None:
        parser.error("--webhook-delay-ms delays webhooks: it needs --webhook-url")
    return args


def webhook_config(args: argparse.Namespace) -> WebhookConfig | None:
    if args.webhook_url is None:
        return None
    return WebhookConfig(
        url=args.webhook_url,
        secret=args.webhook_secret,
        scheme=parse_scheme(args.webhook_scheme),
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        config = webhook_config(args)
    except WebhookConfigError as exc:
        raise SystemExit(f"python -m services.devtools.sandbox: {exc}") from None
    faults = FaultBoard()
    if config is None:
        app = create_app(SandboxStore(args.db), faults)
    else:
        enqueue = delivery_enqueuer(delay_s=args.webhook_delay_ms / 1000)
        store = SandboxStore(args.db, on_record=enqueue)
        sender = WebhookSender(config, WebhookOutbox(store), faults)
        app = create_app(store, faults, sender)
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
