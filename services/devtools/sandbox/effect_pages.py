"""The sandbox's list of effects in pages (`GET /v1/effects?limit=&starting_after=`,
newest first, `has_more`): a reader of every page for the devtools and tests that read
back what the sandbox holds. The unpaged answer (CONTRACT.md) holds the whole history in
one body, which grows without bound (over recon's 256 KiB answer bound at about a thousand
effects); pages keep every reader working however long the history."""

from typing import Any

import httpx

from services.devtools.sandbox.pages import every_page


async def every_effect(
    client: httpx.AsyncClient, sandbox_url: str, operation: str | None = None
) -> list[dict[str, Any]]:
    """Every visible effect (of `operation`), oldest first as the unpaged answer lists
    them. An effect made while the pages are read may be left out, as it would be from an
    answer read a moment earlier."""
    params = {} if operation is None else {"operation": operation}
    newest_first = await every_page(client, f"{sandbox_url}/v1/effects", "effects", params, "id")
    return newest_first[::-1]
