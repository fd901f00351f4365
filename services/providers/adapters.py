"""The sandbox provider's adapter (docs/contract.md, "Sandbox provider"): the `sandbox`
entry point of services.providers.registry, and the adapter of every provider whose
configuration names none.

Lookups ask the provider by key (`GET /v1/effects?idempotency_key=K`: the `query`
strategy); answers are judged by services.providers.classify, the sandbox's rule.
"""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from events.catalog import OperationInfo
from events.inputs import Outcome
from events.observation import Seen
from reconcilers.signatures import Scheme
from reconcilers.webhook_reading import WebhookReading, read_effect_webhook
from services import tracing
from services.providers.classify import classify_lookup, classify_response, unreachable
from services.providers.http import ProviderUnreachable, Requester
from services.providers.interface import EffectListing, ListingUnavailable, ProviderSetup, Sent
from services.providers.listing import newest_first_pages
from services.providers.lookup_strategy import Strategy
from services.providers.paths import UnsafeSegment, segment
from services.providers.sandbox_operations import SANDBOX_OPERATIONS

# The drift scan's pages: 100 effects (~30 KiB), and at most 100 of them (10,000 effects
# in the window) a scan.
PAGE = 100
MAX_LIST_PAGES = 100


class SandboxAdapter:
    operations: Mapping[str, OperationInfo] = SANDBOX_OPERATIONS
    webhook_scheme = Scheme.STANDARD
    # The sandbox keeps its keys for ever and answers lookups by key.
    key_retention_s: float | None = None
    lookup_strategy = Strategy.QUERY
    # The drift scan's listing: pages of this size, at most this many (RECON_DRIFT_LIST_PAGES
    # sets an instance's cap; tests lower both).
    list_page = PAGE
    max_list_pages = MAX_LIST_PAGES

    def __init__(self, http: Requester, base_url: str, max_list_pages: int | None = None) -> None:
        self.http = http
        self.base_url = base_url.rstrip("/")
        if max_list_pages is not None:
            self.max_list_pages = max_list_pages

    @classmethod
    def from_setup(cls, setup: ProviderSetup) -> "SandboxAdapter":
        return cls(setup.http, setup.base_url, setup.max_list_pages)

    def classify(self, operation: str, status: int, body: Any) -> Seen:
        return classify_response(status, body)

    async def apply(self, operation: str, op_key: str, payload: dict[str, Any]) -> Seen:
        path = "/v1/" + operation.replace(".", "/")
        try:
            response = await self.http.request(
                "POST",
                self.base_url + path,
                json={**payload, "metadata": {"op_key": op_key}},
                # The trace context goes with the call: the provider's log of it names the
                # trace that made it (services.tracing).
                headers={"Idempotency-Key": op_key, **tracing.http_headers()},
            )
        except ProviderUnreachable as error:
            return unreachable(error.error)
        return self.classify(operation, response.status, response.json())

    async def preview(self, operation: str, payload: dict[str, Any]) -> tuple[int | None, Any]:
        """`POST <operation path>/preview`: what the sandbox would do, from its own state."""
        path = "/v1/" + operation.replace(".", "/") + "/preview"
        try:
            response = await self.http.request("POST", self.base_url + path, json=payload)
        except ProviderUnreachable as error:
            return None, {"error": "provider_unreachable", "message": type(error.error).__name__}
        return response.status, response.json()

    async def lookup(self, operation: str, op_key: str, sent: Sent | None = None) -> Seen:
        try:
            response = await self.http.request(
                "GET",
                self.base_url + "/v1/effects",
                params={"idempotency_key": op_key},
                headers=tracing.http_headers(),
            )
        except ProviderUnreachable as error:
            seen = unreachable(error.error)
            return Seen(Outcome.UNAVAILABLE, error=seen.error)
        return classify_lookup(response.status, response.json())

    async def balance(self, charge: str) -> tuple[int, Any]:
        try:
            # The charge id is the agent's string: one escaped segment, never a path.
            path = f"/v1/charges/{segment(charge)}/balance"
        except UnsafeSegment as error:
            return 0, {"error": str(error)}
        try:
            response = await self.http.request(
                "GET",
                self.base_url + path,
                headers=tracing.http_headers(),
            )
        except ProviderUnreachable as error:
            return 0, {"error": str(error)}
        return response.status, response.json()

    # The drift scan passes its account's cursor less the grace (services.providers.listing),
    # and a hole's top (reconcilers.drift_span.Hole) as `until`: `created_lt`.
    lists_since = True
    lists_until = True

    async def list_effects(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> EffectListing:
        """The effects created since `since` (and before `until`), newest first, page by
        page: a page of 100 stays far under the answer bound (services.providers.http.
        MAX_ANSWER_BYTES) that the whole list passed at about a thousand effects; past
        MAX_LIST_PAGES the listing is cut, and says so."""
        first = {"limit": str(self.list_page)}
        if since is not None:
            first["created_gte"] = since.isoformat()
        if until is not None:
            first["created_lt"] = until.isoformat()
        return await newest_first_pages(self._effects_page, first, self.max_list_pages)

    async def _effects_page(self, params: dict[str, str]) -> tuple[list[dict[str, Any]], bool]:
        try:
            response = await self.http.request("GET", self.base_url + "/v1/effects", params=params)
        except ProviderUnreachable as error:
            raise ListingUnavailable(str(error)) from error
        body = response.json()
        if response.status != 200 or not isinstance(body, dict):
            raise ListingUnavailable(f"GET /v1/effects answered {response.status}: {body}")
        effects = body.get("effects")
        if not isinstance(effects, list) or not all(isinstance(e, dict) for e in effects):
            raise ListingUnavailable(f"GET /v1/effects without an 'effects' list: {body}")
        return effects, body.get("has_more") is True

    def read_webhook(self, body: bytes) -> WebhookReading:
        """recon's own format, which the sandbox sends (docs/contract.md, "Webhooks")."""
        return read_effect_webhook(body)
