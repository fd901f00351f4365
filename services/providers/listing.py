"""How the drift scan asks an adapter for its effects: for the window alone when the
adapter declares it can filter (`lists_since`), for everything otherwise (an adapter
written before `since` existed takes no argument), and always as an EffectListing (a bare
list is whole). Below an instant too (`until`, an account's hole: reconcilers.drift_span)
only from an adapter that declares `lists_until`; the scan asks none other for a hole."""

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


class ListsUntil(Protocol):
    async def list_effects(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> "list[Any] | EffectListing":
        """The effects created at or after `since` and before `until`."""
        ...


def can_list_until(adapter: ProviderAdapter) -> bool:
    """Whether the adapter declares it can list below an instant (and since one)."""
    return getattr(adapter, "lists_until", False) is True and can_list_since(adapter)


def can_list_since(adapter: ProviderAdapter) -> bool:
    return getattr(adapter, "lists_since", False) is True


async def listing_of(
    adapter: ProviderAdapter, since: datetime | None, until: datetime | None = None
) -> EffectListing:
    """`until`: only for an adapter that `lists_until` (a ValueError otherwise: a listing
    of everything would be taken for the hole's)."""
    if until is not None:
        if not can_list_until(adapter):
            raise ValueError(f"{type(adapter).__name__} cannot list below an instant")
        answer = await cast(ListsUntil, adapter).list_effects(since=since, until=until)
    elif can_list_since(adapter):
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
