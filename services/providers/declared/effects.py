"""The drift listing of a provider file: every page of the provider's effects (those
created since the scan's window start, when the file names its filter), each read into the
shape reconcilers.drift.effect_from_json reads."""

import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from services.providers.declared import fields
from services.providers.declared.model import Listing
from services.providers.http import Answer, ProviderUnreachable
from services.providers.interface import (
    NOTHING_COVERED,
    EffectListing,
    ListingUnavailable,
    cut_listing,
)


def effect(listing: Listing, item: dict[str, Any]) -> dict[str, Any]:
    kind = fields.get(item, listing.kind)
    key = fields.get(item, listing.key)
    return {
        "id": str(fields.get(item, listing.id)),
        "operation": listing.operations.get(str(kind), str(kind)),
        # An effect without recon's key is someone else's: drift, by design.
        "idempotency_key": key if isinstance(key, str) else "",
        "payload": {
            name: value
            for name, pointer in listing.payload.items()
            if (value := fields.get(item, pointer)) is not fields.MISSING
        },
        "created_at": _instant(fields.get(item, listing.created_at)),
    }


def _instant(value: Any) -> str:
    # Epoch seconds or an ISO 8601 string, as providers write them.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).isoformat()
    return str(value) if isinstance(value, str) else datetime.fromtimestamp(0, UTC).isoformat()


def since_params(listing: Listing, since: datetime | None) -> dict[str, str]:
    """The query parameter that asks for the effects created at or after `since`, in the
    file's format; none when the file names no such parameter or nothing is asked. Unix
    seconds round down, so the effect at `since` itself is still listed."""
    if listing.since_param is None or since is None:
        return {}
    if listing.since_format == "unix":
        return {listing.since_param: str(math.floor(since.timestamp()))}
    return {listing.since_param: since.isoformat()}


async def listed(
    page: Callable[[dict[str, str]], Awaitable[Answer]],
    listing: Listing,
    since: datetime | None = None,
) -> EffectListing:
    """Every listed effect (created at or after `since` when the file can ask so), `page`
    asking for one page with the given parameters. Cut when `max_pages` pages still had a
    next one: a provider that lists newest first leaves out only effects older than the
    oldest listed (cut_listing); one whose file declares no order leaves out effects of
    any age, which prove no leg's effect absent (NOTHING_COVERED)."""
    found: list[dict[str, Any]] = []
    first = {**listing.params, **since_params(listing, since)}
    params = first
    for _ in range(listing.max_pages):
        try:
            answer = await page(params)
        except ProviderUnreachable as error:
            raise ListingUnavailable(str(error)) from error
        body = answer.json()
        items = fields.get(body, listing.items)
        if answer.status != 200 or not isinstance(items, list):
            raise ListingUnavailable(f"GET {listing.path} answered {answer.status}: {body}")
        read = [effect(listing, item) for item in items if isinstance(item, dict)]
        found += read
        cursor = _cursor(listing, body, read)
        if cursor in (None, "", fields.MISSING) or not items:
            return EffectListing(found)
        assert listing.cursor_param is not None  # the model pairs it with `next` or `more`
        params = {**first, listing.cursor_param: str(cursor)}
    if listing.order == "newest_first":
        return cut_listing(found)
    return EffectListing(found, NOTHING_COVERED)


def _cursor(listing: Listing, body: Any, read: list[dict[str, Any]]) -> Any:
    """The next page's cursor: the answer's own (`next`), or the last item's id while
    the answer says more follow (`more`); None when this was the last page."""
    if listing.next is not None:
        return fields.get(body, listing.next)
    if listing.more is not None and fields.get(body, listing.more) is True and read:
        return read[-1]["id"]
    return None
