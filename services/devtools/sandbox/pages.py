"""The sandbox's paged lists (`GET /v1/effects`, `GET /v1/calls`: `limit`, `starting_after`,
`has_more`): their largest page, and the one loop that reads such a list to its end for the
devtools and tests that read back what the sandbox holds (effect_pages.every_effect,
call_pages.every_call)."""

from typing import Any

import httpx

# The largest page of a paged list (Stripe's lists allow 100 too).
MAX_PAGE = 100


async def every_page(
    client: httpx.AsyncClient, url: str, items: str, params: dict[str, str], cursor: str
) -> list[dict[str, Any]]:
    """Every item of the list at `url` (under its body's `items`), pages of MAX_PAGE asked
    in turn, each `starting_after` the previous page's last item's `cursor` field, in the
    order the pages list them."""
    params = {**params, "limit": str(MAX_PAGE)}
    listed: list[dict[str, Any]] = []
    while True:
        answer = await client.get(url, params=params)
        answer.raise_for_status()
        body = answer.json()
        page: list[dict[str, Any]] = body[items]
        listed += page
        if not body["has_more"] or not page:
            return listed
        params = {**params, "starting_after": str(page[-1][cursor])}
