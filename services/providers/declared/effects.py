"""The drift listing of a provider file: every page of the provider's effects, each read
into the shape reconcilers.drift.effect_from_json reads."""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from services.providers.declared import fields
from services.providers.declared.model import Listing
from services.providers.http import Answer, ProviderUnreachable
from services.providers.interface import NOTHING_COVERED, EffectListing, ListingUnavailable


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


async def listed(
    page: Callable[[dict[str, str]], Awaitable[Answer]], listing: Listing
) -> EffectListing:
    """Every listed effect, `page` asking for one page with the given parameters. Cut
    when `max_pages` pages still had a next one: the file does not say in which order the
    provider lists, so the effects left out may be any age and prove no leg's effect
    absent (NOTHING_COVERED)."""
    found: list[dict[str, Any]] = []
    params = dict(listing.params)
    for _ in range(listing.max_pages):
        try:
            answer = await page(params)
        except ProviderUnreachable as error:
            raise ListingUnavailable(str(error)) from error
        body = answer.json()
        items = fields.get(body, listing.items)
        if answer.status != 200 or not isinstance(items, list):
            raise ListingUnavailable(f"GET {listing.path} answered {answer.status}: {body}")
        found += [effect(listing, item) for item in items if isinstance(item, dict)]
        cursor = None if listing.next is None else fields.get(body, listing.next)
        if cursor in (None, "", fields.MISSING) or not items:
            return EffectListing(found)
        assert listing.cursor_param is not None  # the model pairs it with `next`
        params = {**listing.params, listing.cursor_param: str(cursor)}
    return EffectListing(found, NOTHING_COVERED)
