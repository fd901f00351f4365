"""How the drift scan asks an adapter for its effects: for the window alone when the
adapter declares it can filter (`lists_since`), for everything otherwise (an adapter
written before `since` existed takes no argument), and always as an EffectListing (a bare
list is whole)."""

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol, cast

from services.providers.interface import EffectListing, ProviderAdapter, cut_listing

# One page of a list: its items and whether the provider says more follow. Raises
# ListingUnavailable when the provider did not answer with a page.
AskPage = Callable[[dict[str, str]], Awaitable[tuple[list[dict[str, Any]], bool]]]


class ListsSince(Protocol):
    async def list_effects(self, since: datetime | None = None) -> "list[Any] | EffectListing":
        """The effects created at or after `since`."""
        ...


async def listing_of(adapter: ProviderAdapter, since: datetime | None) -> EffectListing:
    if getattr(adapter, "lists_since", False) is True:
        answer = await cast(ListsSince, adapter).list_effects(since=since)
    else:
        answer = await adapter.list_effects()
    return answer if isinstance(answer, EffectListing) else EffectListing(list(answer))


async def newest_first_pages(
    ask: AskPage,
    first: dict[str, str],
    max_pages: int,
    read: Callable[[dict[str, Any]], Any] = lambda item: item,
) -> EffectListing:
    """A list paged as Stripe's are (the sandbox's too): newest first, the next page asked
    `starting_after` the last item's id while the answer says more follow. Each item `read`
    into an effect; cut (cut_listing) when `max_pages` pages still had more."""
    items: list[dict[str, Any]] = []
    params = first
    for _ in range(max_pages):
        page, more = await ask(params)
        items += page
        if not more or not page:
            return EffectListing([read(item) for item in items])
        params = {**first, "starting_after": str(page[-1].get("id"))}
    return cut_listing([read(item) for item in items])
