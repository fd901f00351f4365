"""The sandbox's list of effects in pages (`GET /v1/effects?limit=&starting_after=`,
newest first, `has_more`): its largest page, and a reader of every page for the devtools
and tests that read back what the sandbox holds. The unpaged answer (CONTRACT.md) holds the
whole history in one body, which grows without bound (over recon's 256 KiB answer bound at
about a thousand effects); pages keep every reader working however long the history."""

from typing import Any

import httpx

# The largest page of `GET /v1/effects?limit=` (Stripe's lists allow 100 too).
MAX_PAGE = 100


async def every_effect(
    client: httpx.AsyncClient, sandbox_url: str, operation: str | None = None
) -> list[dict[str, Any]]:
    """Every visible effect (of `operation`), oldest first as the unpaged answer lists
    them. An effect made while the pages are read may be left out, as it would be from an
    answer read a moment earlier."""
    params = {"limit": str(MAX_PAGE)}
    if operation is not None:
        params["operation"] = operation
    newest_first: list[dict[str, Any]] = []
    while True:
        answer = await client.get(f"{sandbox_url}/v1/effects", params=params)
        answer.raise_for_status()
        body = answer.json()
        page: list[dict[str, Any]] = body["effects"]
        newest_first += page
        if not body["has_more"] or not page:
            return newest_first[::-1]
        params = {**params, "starting_after": page[-1]["id"]}
