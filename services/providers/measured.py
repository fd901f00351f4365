"""An adapter whose calls feed the metrics (services.metrics): each apply's time by
provider, operation and outcome, each lookup's outcome. One observation per call; every
other method is the inner adapter's own."""

import time
from datetime import datetime
from typing import Any

from events.observation import Seen
from reconcilers.webhook_reading import WebhookReading
from services.metrics import DISPATCH_SECONDS, LOOKUPS, labelled
from services.providers.interface import EffectListing, ProviderAdapter, Sent
from services.providers.listing import can_list_until, listing_of
from services.providers.lookup_strategy import strategy_of


class Measured:
    def __init__(self, provider: str, inner: ProviderAdapter) -> None:
        self.provider = provider
        self.inner = inner
        self.operations = inner.operations
        self.webhook_scheme = inner.webhook_scheme
        self.key_retention_s = inner.key_retention_s
        self.lookup_strategy = strategy_of(inner)

    async def apply(self, operation: str, op_key: str, payload: dict[str, Any]) -> Seen:
        started = time.perf_counter()
        seen = await self.inner.apply(operation, op_key, payload)
        labelled(DISPATCH_SECONDS, self.provider, operation, seen.outcome.value).observe(
            time.perf_counter() - started
        )
        return seen

    async def lookup(self, operation: str, op_key: str, sent: Sent | None = None) -> Seen:
        seen = await self.inner.lookup(operation, op_key, sent)
        labelled(LOOKUPS, self.provider, seen.outcome.value).inc()
        return seen

    def classify(self, operation: str, status: int, body: Any) -> Seen:
        return self.inner.classify(operation, status, body)

    async def preview(self, operation: str, payload: dict[str, Any]) -> tuple[int | None, Any]:
        return await self.inner.preview(operation, payload)

    async def balance(self, charge: str) -> tuple[int, Any]:
        return await self.inner.balance(charge)

    # The inner adapter's `since` is passed on only if it declares it takes one.
    lists_since = True

    @property
    def lists_until(self) -> bool:
        """The inner adapter's: a hole is asked of an adapter that can list below it."""
        return can_list_until(self.inner)

    async def list_effects(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> EffectListing:
        return await listing_of(self.inner, since, until)

    def read_webhook(self, body: bytes) -> WebhookReading:
        return self.inner.read_webhook(body)
