"""A reader of the sandbox's call log in pages (`GET /v1/calls?limit=&starting_after=`,
arrival order, `has_more`), for the devtools and tests that count what reached the provider
(the chaos collector, tests' recon_client). The unpaged answer holds every call in one body:
a 10,000-transaction chaos run logs ~40,000, one body a loaded sandbox took over a minute to
build. Pages keep each request small however long the log."""

from typing import Any

import httpx

from services.devtools.sandbox.pages import every_page


async def every_call(
    client: httpx.AsyncClient,
    sandbox_url: str,
    idempotency_key: str | None = None,
    operation: str | None = None,
) -> list[dict[str, Any]]:
    """Every call the sandbox answered (under `idempotency_key`, of `operation`), in arrival
    order as the unpaged answer lists them. The log only grows at its end, so pages read
    after one another miss nothing before the last call listed; a call answered while they
    are read may be listed or not, as it would be from one answer read a moment apart."""
    params = {}
    if idempotency_key is not None:
        params["idempotency_key"] = idempotency_key
    if operation is not None:
        params["operation"] = operation
    return await every_page(client, f"{sandbox_url}/v1/calls", "calls", params, "seq")
