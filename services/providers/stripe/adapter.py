"""The Stripe adapter's calls (https://docs.stripe.com/api).

Lookup strategy `replay` (services.providers.lookup_strategy): Stripe answers a request
sent again under the same `Idempotency-Key` with the first request's saved answer, for at
least 24 hours; after that the key is pruned and a resend is a new request (a second
charge). So a lookup resends the identical request only while the key is inside
KEY_RETENTION_S, judged from the dispatch's time (earlier than the first send: it errs
towards "pruned"); past it, or without the first request, it never resends and finds the
object by `metadata[op_key]` instead (the intent's search, a payment intent's refunds, the
intent a confirm or cancel acted on).
"""

import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from events.catalog import OperationInfo
from events.inputs import Outcome
from events.observation import Seen
from reconcilers.signatures import Scheme
from reconcilers.webhook_reading import WebhookReading
from services.providers.classify import TIMING_4XX, lookup_misdirected, unreachable
from services.providers.http import Answer, ProviderUnreachable, Requester
from services.providers.interface import (
    AdapterSetupError,
    EffectListing,
    ListingUnavailable,
    ProviderSetup,
    Sent,
)
from services.providers.listing import newest_first_pages
from services.providers.lookup_strategy import Strategy, inside_retention, replayed
from services.providers.paths import UnsafeSegment, segment
from services.providers.stripe import classify as rules
from services.providers.stripe.forms import encode
from services.providers.stripe.operations import (
    CREATED_BY,
    DECLARED,
    OPERATIONS,
    PAYMENT_INTENT,
    REFUND,
    StripeOperation,
)
from services.providers.stripe.webhooks import read_event

# Stripe keeps a key's first answer "at least 24 hours" (docs.stripe.com/api/
# idempotent_requests); recon resends only inside that, never at the edge of it.
KEY_RETENTION_S = 24 * 3600.0
# Stripe's search is eventually consistent ("data ... may be delayed up to a minute",
# docs.stripe.com/search): an intent not found sooner than this after its request may
# still exist, so not finding it proves nothing.
SEARCH_LAG_S = 60.0
# The drift scan reads at most this many pages of 100 per resource, unless
# RECON_DRIFT_LIST_PAGES sets the provider's (docs/webhooks-reviews-drift.md: what a cut
# costs, the hole below it).
MAX_LIST_PAGES = 10
# Answers are read in the shape of this API version, whatever the account's default.
STRIPE_VERSION = "2024-06-20"
FORM = "application/x-www-form-urlencoded"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class StripeAdapter:
    operations: Mapping[str, OperationInfo] = DECLARED
    webhook_scheme = Scheme.STRIPE
    key_retention_s: float | None = KEY_RETENTION_S
    lookup_strategy = Strategy.REPLAY
    max_list_pages = MAX_LIST_PAGES

    def __init__(
        self,
        http: Requester,
        base_url: str,
        api_key: str,
        clock: Callable[[], datetime] | None = None,
        max_list_pages: int | None = None,
    ) -> None:
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}", "Stripe-Version": STRIPE_VERSION}
        self.clock = clock or _utcnow
        if max_list_pages is not None:
            self.max_list_pages = max_list_pages

    @classmethod
    def from_setup(cls, setup: ProviderSetup) -> "StripeAdapter":
        if not setup.secret:
            raise AdapterSetupError(
                f"provider {setup.name!r} uses the stripe adapter and needs its API key: set "
                f"RECON_PROVIDER_SECRETS={setup.name}=sk_test_... (a restricted key will do)"
            )
        return cls(setup.http, setup.base_url, setup.secret, setup.clock, setup.max_list_pages)

    def classify(self, operation: str, status: int, body: Any) -> Seen:
        return rules.classify(operation, status, body)

    async def apply(self, operation: str, op_key: str, payload: dict[str, Any]) -> Seen:
        op = OPERATIONS.get(operation)
        if op is None:
            # Never sent, never will be: a step named an operation Stripe's adapter has not.
            alarm = f"the stripe adapter has no operation {operation!r}"
            return Seen(Outcome.REJECTED, error=f"unsupported_operation: {alarm}", alarm=alarm)
        try:
            path, params = _request(op, op_key, payload)
        except UnsafeSegment as error:
            # Never sent: nothing was made, and a resend would be refused the same way.
            return Seen(Outcome.REJECTED, error=f"invalid_request: {error}")
        try:
            answer = await self.http.request(
                "POST",
                self.base_url + path,
                data=encode(params),
                headers={**self.headers, "Content-Type": FORM, "Idempotency-Key": op_key},
            )
        except ProviderUnreachable as error:
            return unreachable(error.error)
        return self.classify(operation, answer.status, answer.json())

    async def lookup(self, operation: str, op_key: str, sent: Sent | None = None) -> Seen:
        now = self.clock()
        age = None if sent is None else (now - sent.at).total_seconds()
        if inside_retention(sent, KEY_RETENTION_S, now):
            assert sent is not None
            return replayed(await self.apply(operation, op_key, sent.payload))
        op = OPERATIONS.get(operation)
        if op is None:
            alarm = f"the stripe adapter has no operation {operation!r}"
            return Seen(Outcome.UNAVAILABLE, error=alarm, alarm=alarm)
        return await self._find(op, op_key, sent, age)

    async def _find(
        self, op: StripeOperation, op_key: str, sent: Sent | None, age: float | None
    ) -> Seen:
        """The object by `metadata[op_key]`, without resending anything."""
        payload = sent.payload if sent is not None else {}
        try:
            if op.target is not None:
                # Confirm and cancel: the intent they act on says whether they did.
                if not isinstance(payload.get(op.target), str):
                    return _cannot_tell("the intent acted on is not known")
                answer = await self._get(f"/v1/payment_intents/{segment(payload[op.target])}")
                found = answer.json() if answer.status == 200 else None
            elif op.kind == REFUND:
                if not isinstance(payload.get("payment_intent"), str):
                    return _cannot_tell("the refunded intent is not known")
                answer = await self._get(
                    "/v1/refunds", {"payment_intent": payload["payment_intent"], "limit": "100"}
                )
                found = _with_key(answer, op_key)
            else:
                query = f"metadata['op_key']:'{_quoted(op_key)}'"
                answer = await self._get("/v1/payment_intents/search", {"query": query})
                found = _with_key(answer, op_key)
        except UnsafeSegment as error:
            return _cannot_tell(str(error))
        except ProviderUnreachable as error:
            return Seen(Outcome.UNAVAILABLE, error=str(error))
        if 400 <= answer.status < 500 and answer.status not in TIMING_4XX:
            return lookup_misdirected(answer.status, answer.json(), "a Stripe lookup")
        if answer.status != 200:
            return Seen(Outcome.UNAVAILABLE, answer.status, None, answer.json())
        if found is None:
            if op.kind == PAYMENT_INTENT and op.target is None and (age or 0) < SEARCH_LAG_S:
                return _cannot_tell("Stripe's search may not show an intent this recent")
            return Seen(Outcome.ABSENT, answer.status, None, answer.json())
        seen = rules.judge_object(op, answer.status, found)
        if seen.outcome is Outcome.SUCCEEDED or found.get("status") in op.pending:
            return seen
        if op.target is not None:
            # The intent is there but not in the state this operation leaves it in.
            return Seen(Outcome.ABSENT, answer.status, None, found)
        return seen

    async def preview(self, operation: str, payload: dict[str, Any]) -> tuple[int | None, Any]:
        return 501, {
            "error": "preview_unsupported",
            "message": "Stripe has no dry run of a payment or a refund",
        }

    async def balance(self, charge: str) -> tuple[int, Any]:
        """A payment intent's refundable balance, in preconditions.BALANCE_FIELDS."""
        try:
            answer = await self._get(
                f"/v1/payment_intents/{segment(charge)}", {"expand[]": "latest_charge"}
            )
        except (UnsafeSegment, ProviderUnreachable) as error:
            return 0, {"error": str(error)}
        body = answer.json()
        if answer.status != 200 or not isinstance(body, dict):
            return answer.status, body
        latest = body.get("latest_charge")
        refunded = latest.get("amount_refunded") if isinstance(latest, dict) else 0
        received = body.get("amount_received")
        if not isinstance(received, int) or not isinstance(refunded, int):
            return answer.status, {"error": "not a payment intent's amounts"}
        return answer.status, {
            "charge": charge,
            "amount": received,
            "refunded": refunded,
            "refundable": received - refunded,
            "revoked": body.get("status") == "canceled",
        }

    # The drift scan passes its account's cursor less the grace, and a hole's top below a
    # cut listing (reconcilers.drift_span.Hole): Stripe's lists filter by `created[gte]`
    # and `created[lt]` (tests/contract/test_stripe_mock_shapes.py).
    lists_since = True
    lists_until = True

    async def list_effects(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> EffectListing:
        effects: list[Any] = []
        cuts: list[datetime] = []
        for resource in ("/v1/payment_intents", "/v1/refunds"):
            listing = await self._list(resource, since, until)
            effects += listing.effects
            if listing.covered_from is not None:
                cuts.append(listing.covered_from)
        # Each resource is covered from its own cut on: both from the later one.
        return EffectListing(effects, max(cuts, default=None))

    async def _list(
        self, resource: str, since: datetime | None, until: datetime | None
    ) -> EffectListing:
        """One resource's objects (newest first, as Stripe lists), read into effects; cut
        (cut_listing) when `max_list_pages` pages left older ones out."""
        first = {"limit": "100"}
        if since is not None:
            # Whole seconds, rounded down: an object in `since`'s second is listed.
            first["created[gte]"] = str(math.floor(since.timestamp()))
        if until is not None:
            # Rounded up: every object created before `until` is listed (one in its very
            # second after it may be too, judged again and filtered as reported).
            first["created[lt]"] = str(math.ceil(until.timestamp()))

        async def ask(params: dict[str, str]) -> tuple[list[dict[str, Any]], bool]:
            try:
                answer = await self._get(resource, params)
            except ProviderUnreachable as error:
                raise ListingUnavailable(str(error)) from error
            body = answer.json()
            data = body.get("data") if isinstance(body, dict) else None
            if answer.status != 200 or not isinstance(data, list):
                raise ListingUnavailable(f"GET {resource} answered {answer.status}: {body}")
            page = [item for item in data if isinstance(item, dict) and "id" in item]
            return page, bool(body.get("has_more"))

        return await newest_first_pages(ask, first, self.max_list_pages, _effect)

    async def _get(self, path: str, params: dict[str, str] | None = None) -> Answer:
        return await self.http.request(
            "GET", self.base_url + path, params=params, headers=self.headers
        )

    def read_webhook(self, body: bytes) -> WebhookReading:
        """Stripe's events (webhooks.py)."""
        return read_event(body)


def _request(op: StripeOperation, op_key: str, payload: dict[str, Any]) -> tuple[str, Any]:
    params = dict(payload)
    path = op.path
    if op.target is not None:
        target = params.pop(op.target, None)
        if not isinstance(target, str):
            raise UnsafeSegment(f"{op.target} must be the id of the object acted on")
        path = path.replace("{id}", segment(target))
    if op.carries_metadata:
        metadata = params.get("metadata")
        params["metadata"] = {**(metadata if isinstance(metadata, dict) else {}), "op_key": op_key}
    return path, params


def _with_key(answer: Answer, op_key: str) -> dict[str, Any] | None:
    body = answer.json()
    data = body.get("data") if isinstance(body, dict) else None
    for item in data if isinstance(data, list) else []:
        metadata = item.get("metadata") if isinstance(item, dict) else None
        if isinstance(metadata, dict) and metadata.get("op_key") == op_key:
            found: dict[str, Any] = item
            return found
    return None


def _quoted(value: str) -> str:
    # Stripe's search language quotes with ' and escapes with \.
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _cannot_tell(why: str) -> Seen:
    return Seen(Outcome.UNAVAILABLE, error=f"lookup cannot tell: {why}")


def _effect(item: dict[str, Any]) -> dict[str, Any]:
    """A listed Stripe object as the drift scan reads effects (reconcilers.drift)."""
    metadata = item.get("metadata")
    key = metadata.get("op_key") if isinstance(metadata, dict) else None
    created = item.get("created")
    payload = {
        name: item[name] for name in ("amount", "currency", "payment_intent") if name in item
    }
    return {
        "id": item["id"],
        "operation": CREATED_BY.get(str(item.get("object")), str(item.get("object"))),
        # An object without recon's key is someone else's effect: drift, by design.
        "idempotency_key": key if isinstance(key, str) else "",
        "payload": payload,
        "created_at": datetime.fromtimestamp(
            created if isinstance(created, int) else 0, UTC
        ).isoformat(),
    }
