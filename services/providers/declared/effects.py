"""The drift listing of a provider file: every page of the provider's effects (those
created since the account's drift cursor less the grace, when the file names its filter),
each read into the shape reconcilers.drift.effect_from_json reads."""

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


def effect(listing: Listing, item: Any) -> Any:
    """The listed item in the shape effect_from_json reads. A field the file points at and
    the item lacks is left out, not made up, so the scan finds the item unreadable and skips
    the account (docs/webhooks-reviews-drift.md) instead of judging a guess: an id
    "<object ...>", or a creation time of 1970 that puts an effect without intent outside
    every window. An item that is not an object is passed on as it is, for the same verdict."""
    if not isinstance(item, dict):
        return item
    read: dict[str, Any] = {
        # An effect without recon's key is someone else's: drift, by design.
        "idempotency_key": key if isinstance(key := fields.get(item, listing.key), str) else "",
        "payload": {
            name: value
            for name, pointer in listing.payload.items()
            if (value := fields.get(item, pointer)) is not fields.MISSING
        },
    }
    if (id_ := _scalar(fields.get(item, listing.id))) is not None:
        read["id"] = id_
    if (kind := _scalar(fields.get(item, listing.kind))) is not None:
        read["operation"] = listing.operations.get(kind, kind)
    if (created_at := _instant(fields.get(item, listing.created_at))) is not None:
        read["created_at"] = created_at
    return read


def _scalar(value: Any) -> str | None:
    # A provider's id or kind is a string or a number; anything else names nothing.
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        return None
    return str(value)


def _instant(value: Any) -> str | None:
    # Epoch seconds or an ISO 8601 string, as providers write them.
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC).isoformat()
        except (OverflowError, ValueError, OSError):  # NaN, or past year 9999
            return None
    return value if isinstance(value, str) else None


def since_params(
    listing: Listing, since: datetime | None, until: datetime | None = None
) -> dict[str, str]:
    """The query parameters that ask for the effects created at or after `since` (and
    before `until`), in the file's format; none when the file names no such parameter or
    nothing is asked. Unix seconds round `since` down and `until` up, so every effect in
    [since, until) is still listed (one in `until`'s second after it may be too)."""
    asked: dict[str, str] = {}
    if listing.since_param is not None and since is not None:
        asked[listing.since_param] = _written(listing, since, math.floor)
    if listing.until_param is not None and until is not None:
        asked[listing.until_param] = _written(listing, until, math.ceil)
    return asked


def _written(listing: Listing, at: datetime, rounded: Callable[[float], int]) -> str:
    if listing.since_format == "unix":
        return str(rounded(at.timestamp()))
    return at.isoformat()


async def listed(
    page: Callable[[dict[str, str]], Awaitable[Answer]],
    listing: Listing,
    since: datetime | None = None,
    until: datetime | None = None,
) -> EffectListing:
    """Every listed effect (created at or after `since` when the file can ask so), `page`
    asking for one page with the given parameters. Cut when `max_pages` pages still had a
    next one: a provider that lists newest first leaves out only effects older than the
    oldest listed (cut_listing); one whose file declares no order leaves out effects of
    any age, which prove no leg's effect absent (NOTHING_COVERED)."""
    found: list[dict[str, Any]] = []
    first = {**listing.params, **since_params(listing, since, until)}
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
        read = [effect(listing, item) for item in items]
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
        # The last item without an id (unreadable: the scan skips the account) ends the
        # paging rather than sending a made-up cursor.
        last = read[-1]
        return last.get("id") if isinstance(last, dict) else None
    return None
