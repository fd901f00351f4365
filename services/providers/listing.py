"""How the drift scan asks an adapter for its effects: for the window alone when the
adapter declares it can filter (`lists_since`), for everything otherwise (an adapter
written before `since` existed takes no argument), and always as an EffectListing (a bare
list is whole)."""

from datetime import datetime
from typing import Any, Protocol, cast

from services.providers.interface import EffectListing, ProviderAdapter


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
