"""`recon-mcp [--transport stdio|streamable-http] [--host H] [--port P]` (or
`python -m recon_sdk.mcp`)."""

import argparse
import logging
import sys

from recon_sdk import Recon, ReconError
from recon_sdk.mcp.config import ConfigError, load_mcp_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="recon-mcp", description=__doc__)
    parser.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    args = parser.parse_args(argv)
    # stdout is the protocol under stdio: every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    try:
        settings = load_mcp_settings()
        if args.transport == "streamable-http" and settings.http_token is None:
            raise ConfigError(
                "RECON_MCP_HTTP_TOKEN is not set: the streamable HTTP transport needs the "
                "bearer token its clients must send (it acts with the API key)"
            )
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    # The tools' input schemas are generated from the catalog, so the server does not start
    # without it (the client retries an unreachable intake a few times first).
    try:
        with Recon(settings.intake_url, api_key=settings.api_key) as recon:
            catalog = recon.catalog()
    except ReconError as exc:
        print(
            f"cannot read the catalog from {settings.intake_url} (GET /v1/catalog), which the "
            f"tools' input schemas are generated from: {exc.code}: {exc.message}",
            file=sys.stderr,
        )
        return 3
    if not catalog:
        print("the intake's catalog (GET /v1/catalog) offers no operation", file=sys.stderr)
        return 3
    # Imported after the configuration is checked: a misconfigured start fails fast.
    from recon_sdk.mcp.tools import build_server

    server = build_server(settings, catalog)
    if args.transport == "stdio":
        server.run("stdio")
        return 0
    import uvicorn

    from recon_sdk.mcp.http_auth import BearerAuth

    assert settings.http_token is not None
    app = BearerAuth(server.streamable_http_app(host=args.host), settings.http_token)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
