"""Provider adapters: how to apply an operation and how to look it up by key.

Every adapter sends the operation's key as the provider's idempotency key and the op
key in the provider's metadata, so one id finds the effect from either side.
"""

import json
import time
from typing import Any, Protocol

from events.inputs import Outcome
from events.safe_json import escape_unencodable
from services import tracing
from services.metrics import DISPATCH_SECONDS, LOOKUPS
from services.providers.classify import Seen, classify_lookup, classify_response, unreachable
from services.providers.http import Answer, ProviderUnreachable, Requester
from services.providers.paths import UnsafeSegment, segment


class ProviderAdapter(Protocol):
    async def apply(self, operation: str, op_key: str, payload: dict[str, Any]) -> Seen: ...

    async def lookup(self, operation: str, op_key: str) -> Seen: ...

    async def balance(self, charge: str) -> tuple[int, Any]:
        """The provider's answer about a charge's refundable balance (status, body), for
        the precondition check before a new attempt (preconditions.py); (0, error) when
        it could not be asked."""
        ...

    async def list_effects(self) -> list[Any]:
        """Every effect the provider lists (raw JSON objects), for the drift scan; raises
        ListingUnavailable when the provider cannot answer."""
        ...


class Measured:
    """An adapter whose calls feed the metrics (services.metrics): each apply's time by
    provider, operation and outcome, each lookup's outcome. One observation per call."""

    def __init__(self, provider: str, inner: ProviderAdapter) -> None:
        self.provider = provider
        self.inner = inner

    async def apply(self, operation: str, op_key: str, payload: dict[str, Any]) -> Seen:
        started = time.perf_counter()
        seen = await self.inner.apply(operation, op_key, payload)
        DISPATCH_SECONDS.labels(self.provider, operation, seen.outcome.value).observe(
            time.perf_counter() - started
        )
        return seen

    async def lookup(self, operation: str, op_key: str) -> Seen:
        seen = await self.inner.lookup(operation, op_key)
        LOOKUPS.labels(self.provider, seen.outcome.value).inc()
        return seen

    async def balance(self, charge: str) -> tuple[int, Any]:
        return await self.inner.balance(charge)

    async def list_effects(self) -> list[Any]:
        return await self.inner.list_effects()


class ListingUnavailable(RuntimeError):
    """The provider's list of effects could not be read; the drift scan tries next time."""


class SandboxAdapter:
    """The sandbox provider's HTTP API (docs/contract.md, "Sandbox provider")."""

    def __init__(self, http: Requester, base_url: str) -> None:
        self.http = http
        self.base_url = base_url.rstrip("/")

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
        return classify_response(response.status, _json(response))

    async def preview(self, operation: str, payload: dict[str, Any]) -> tuple[int | None, Any]:
        """What the provider says `operation` would do now, from its own state, without
        doing it (`POST <operation path>/preview`): its status code (None: unreachable)
        and its answer."""
        path = "/v1/" + operation.replace(".", "/") + "/preview"
        try:
            response = await self.http.request("POST", self.base_url + path, json=payload)
        except ProviderUnreachable as error:
            return None, {"error": "provider_unreachable", "message": type(error.error).__name__}
        return response.status, _json(response)

    async def lookup(self, operation: str, op_key: str) -> Seen:
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
        return classify_lookup(response.status, _json(response))

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
        return response.status, _json(response)

    async def list_effects(self) -> list[Any]:
        try:
            response = await self.http.request("GET", self.base_url + "/v1/effects")
        except ProviderUnreachable as error:
            raise ListingUnavailable(str(error)) from error
        body = _json(response)
        if response.status != 200 or not isinstance(body, dict):
            raise ListingUnavailable(f"GET /v1/effects answered {response.status}: {body}")
        effects = body.get("effects")
        if not isinstance(effects, list):
            raise ListingUnavailable(f"GET /v1/effects without an 'effects' list: {body}")
        return effects


def _json(response: Answer) -> Any:
    # Escaped, not trusted: a provider's lone surrogate must become evidence in the
    # observation, not an observation that cannot be encoded (a crash, then a crash loop
    # on redelivery).
    try:
        return escape_unencodable(json.loads(response.body))
    except ValueError:
        # Decoded with replacement characters: always encodable.
        return {"text": response.body.decode("utf-8", "replace")[:2000]}


def build_adapters(http: Requester, providers: dict[str, str]) -> dict[str, ProviderAdapter]:
    # Every configured provider speaks the sandbox's API for now; a Stripe adapter
    # will be chosen here by name.
    return {name: Measured(name, SandboxAdapter(http, url)) for name, url in providers.items()}
