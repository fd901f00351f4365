"""The `declared` adapter: a provider described by a file (RECON_PROVIDER_FILES), spoken
with no Python of its own. Every rule it applies is the file's, read by the modules
beside it; the lookup strategies' shared rules are services.providers.lookup_strategy's.
"""

import asyncio
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from events.catalog import OperationInfo
from events.inputs import Outcome
from events.observation import Seen
from reconcilers.signatures import Scheme
from reconcilers.webhook_reading import WebhookReading
from services import tracing
from services.providers import lookup_strategy as strategies
from services.providers.classify import unreachable
from services.providers.declared import answers, effects, lookups, requests, webhooks
from services.providers.declared.locate import DeclarationError, load
from services.providers.declared.model import Credentials, ProviderFile
from services.providers.http import Answer, ProviderUnreachable, Requester
from services.providers.interface import (
    AdapterSetupError,
    EffectListing,
    ListingUnavailable,
    ProviderSetup,
    Sent,
)
from services.providers.paths import UnsafeSegment


def _utcnow() -> datetime:
    return datetime.now(UTC)


def credential(name: str, declared: Credentials, configured: str | None) -> str:
    """The credential: RECON_PROVIDER_SECRETS, else the file's environment variable, else
    its secrets file; AdapterSetupError naming where it was looked for."""
    if configured:
        return configured
    if declared.env and os.environ.get(declared.env):
        return os.environ[declared.env]
    if declared.file:
        try:
            secret = Path(declared.file).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise AdapterSetupError(
                f"provider {name!r}: cannot read its secrets file {declared.file}: {error.strerror}"
            ) from None
        if secret:
            return secret
    raise AdapterSetupError(
        f"provider {name!r} declares credentials and has none: set RECON_PROVIDER_SECRETS="
        f"{name}=..."
        + (f", or {declared.env}" if declared.env else "")
        + (f", or write {declared.file}" if declared.file else "")
    )


def catalog(declared: ProviderFile) -> dict[str, OperationInfo]:
    return {
        name: OperationInfo(
            name,
            op.side_effect,
            op.reversibility,
            compensation=op.compensation,
            payload_schema=op.payload_schema(),
            amount_field=op.amount_field,
        )
        for name, op in declared.operations.items()
    }


@cache
def declared_operations(path: str) -> dict[str, OperationInfo]:
    """The operations the provider file at `path` declares, without making an adapter
    (what the catalog asks of an adapter class; a declared provider's are its file's).
    The file was validated at start-up (services.config.provider_files)."""
    return catalog(load(path))


class DeclaredAdapter:
    # Class defaults for the configuration's questions asked before any adapter is made;
    # a declared provider's own are its file's (services.config, declared_operations).
    webhook_scheme = Scheme.STANDARD
    key_retention_s: float | None = None

    def __init__(
        self,
        declared: ProviderFile,
        http: Requester,
        base_url: str | None = None,
        secret: str | None = None,
        clock: Callable[[], datetime] | None = None,
        name: str = "declared",
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self.declared = declared
        self.http = http
        self.base_url = (base_url or declared.base_url).rstrip("/")
        self.clock = clock or _utcnow
        self.sleep = sleep
        self.operations: Mapping[str, OperationInfo] = catalog(declared)
        self.webhook_scheme = declared.webhooks.scheme
        self.webhook_horizon_s = declared.webhooks.horizon
        self.lookup_strategy = strategies.Strategy(declared.lookup.strategy)
        self.key_retention_s = declared.lookup.key_retention
        # Declared fact: a key sent again with another payload is refused (the kit's
        # check); a provider that does not may take a changed payload for the first.
        self.refuses_other_payload = declared.idempotency.refuses_other_payload
        self.headers: dict[str, str] = {}
        if declared.credentials is not None:
            token = credential(name, declared.credentials, secret)
            self.headers[declared.credentials.header] = declared.credentials.format.replace(
                "{secret}", token
            )

    @classmethod
    def from_setup(cls, setup: ProviderSetup) -> "DeclaredAdapter":
        if setup.declaration is None:
            raise AdapterSetupError(
                f"provider {setup.name!r} uses the declared adapter without a file: name it "
                f"in RECON_PROVIDER_FILES ({setup.name}=path/to/{setup.name}.toml)"
            )
        try:
            declared = load(setup.declaration)
        except DeclarationError as error:
            raise AdapterSetupError(str(error)) from None
        return cls(declared, setup.http, setup.base_url, setup.secret, setup.clock, setup.name)

    def classify(self, operation: str, status: int, body: Any) -> Seen:
        op = self.declared.operations.get(operation)
        if op is None:
            return Seen(Outcome.UNKNOWN, status, None, body, error=f"no operation {operation!r}")
        return answers.classify(self.declared, op, status, body)

    async def apply(self, operation: str, op_key: str, payload: dict[str, Any]) -> Seen:
        return await self._apply(operation, op_key, payload, self.declared.rate_limit.max_wait)

    async def _apply(
        self, operation: str, op_key: str, payload: dict[str, Any], max_wait: float
    ) -> Seen:
        op = self.declared.operations.get(operation)
        if op is None:
            alarm = f"the provider file declares no operation {operation!r}"
            return Seen(Outcome.REJECTED, error=f"unsupported_operation: {alarm}", alarm=alarm)
        try:
            built = requests.build(self.declared, op, op_key, payload)
        except UnsafeSegment as error:
            # Never sent: nothing was made, and a resend would be refused the same way.
            return Seen(Outcome.REJECTED, error=f"invalid_request: {error}")
        try:
            answer = await self._send(
                built.method, built.path, json=built.body, headers=built.headers, max_wait=max_wait
            )
        except ProviderUnreachable as error:
            return unreachable(error.error)
        return self.classify(operation, answer.status, answer.json())

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        max_wait: float = 0.0,
    ) -> Answer:
        """One request; a `429` is waited out (its Retry-After, the same request under the
        same key) while `max_wait` allows, and returned as it is past it. A call waits up
        to the declared bound (the agent is waiting on it); a lookup or the drift listing
        waits not at all: the pull reconciler's back-off defers it (a 429 is unavailable)."""
        deadline = time.monotonic() + max_wait
        while True:
            answer = await self.http.request(
                method,
                self.base_url + path,
                json=json,
                params=params,
                headers={**self.headers, **(headers or {}), **tracing.http_headers()},
            )
            wait = _retry_after(answer, self.declared.rate_limit.retry_after_header)
            if wait is None or time.monotonic() + wait > deadline:
                return answer
            await self.sleep(wait)

    async def lookup(self, operation: str, op_key: str, sent: Sent | None = None) -> Seen:
        strategy = self.lookup_strategy
        if strategy is strategies.Strategy.NONE:
            return strategies.cannot_be_asked("its provider file declares lookup strategy none")
        if strategy is strategies.Strategy.REPLAY:
            if strategies.inside_retention(sent, self.key_retention_s, self.clock()):
                assert sent is not None
                # A lookup, so it defers a rate limit rather than wait it out.
                replay = await self._apply(operation, op_key, sent.payload, max_wait=0.0)
                return strategies.replayed(replay)
            if self.declared.lookup.query is None:
                return strategies.cannot_be_asked(
                    "past its key retention a resend would be new, and it cannot be queried"
                )
        return await self._query(op_key)

    async def _query(self, op_key: str) -> Seen:
        query = self.declared.lookup.query
        assert query is not None  # the model requires it for query, checked for replay
        try:
            method, path, params = lookups.request(query, op_key)
        except UnsafeSegment as error:
            return Seen(Outcome.UNAVAILABLE, error=f"lookup cannot tell: {error}")
        try:
            answer = await self._send(method, path, params=params)
        except ProviderUnreachable as error:
            return Seen(Outcome.UNAVAILABLE, error=unreachable(error.error).error)
        return lookups.read(query, op_key, answer.status, answer.json())

    async def preview(self, operation: str, payload: dict[str, Any]) -> tuple[int | None, Any]:
        return 501, {
            "error": "preview_unsupported",
            "message": "the provider file declares no preview",
        }

    async def balance(self, charge: str) -> tuple[int, Any]:
        return 0, {"error": "the provider file declares no balance"}

    @property
    def lists_since(self) -> bool:
        """Whether the drift scan may ask for its window alone (services.providers.listing):
        only when the file names the query parameter that filters by creation time."""
        listing = self.declared.listing
        return listing is not None and listing.since_param is not None

    @property
    def lists_until(self) -> bool:
        """Whether the drift scan may list below an instant (an account's hole): only when
        the file names that parameter too (`until_param`)."""
        listing = self.declared.listing
        return listing is not None and listing.until_param is not None

    async def list_effects(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> EffectListing:
        if self.declared.listing is None:
            raise ListingUnavailable("the provider file declares no listing")
        listing = self.declared.listing

        async def page(params: dict[str, str]) -> Answer:
            return await self._send("GET", listing.path, params=params)

        return await effects.listed(page, listing, since, until)

    def read_webhook(self, body: bytes) -> WebhookReading:
        """The provider's events as its file's `[webhooks.events]` reads them; without
        that table, recon's own format (docs/contract.md, "Webhooks")."""
        return webhooks.read(self.declared.webhooks, body)


def _retry_after(answer: Answer, header: str) -> float | None:
    """How long a `429` asks to wait (seconds), or None for any other answer or a
    Retry-After that is not a number of seconds."""
    if answer.status != 429:
        return None
    raw = answer.headers.get(header.lower(), "")
    try:
        seconds = float(raw)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
