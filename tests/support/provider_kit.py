"""What the provider contract kit (tests/contract/test_provider_kit.py) needs of an
adapter under test: a `KitTarget`. docs/providers.md, "The contract kit", says how a
third party points the kit at its own (PROVIDER_KIT_TARGETS=module:attribute).

A target gives the kit its adapter twice: over a scripted HTTP client (the kit plays the
provider, answer by answer, for the classification of every status family) and against
the running provider (`running()`, for the semantics: one effect per key, lookups, the
drift listing). It also says, in the provider's own terms, what a confirmed answer, a
refusal, a reused key and a request in flight look like, and what its webhook events are.
"""

import importlib
import json
import os
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from services.providers.http import Answer, ProviderUnreachable, Requester
from services.providers.interface import ProviderAdapter

TARGETS_VARIABLE = "PROVIDER_KIT_TARGETS"


@dataclass(frozen=True)
class Answers:
    """The provider's answers, as bytes it would send, for `operation`."""

    operation: str
    confirmed: tuple[int, bytes]
    refusal: tuple[int, bytes]
    key_conflict: tuple[int, bytes]
    in_flight: tuple[int, bytes]
    # An error body in the provider's shape, sent with 401, 403, 404, 429 and 5xx.
    error: bytes


@dataclass(frozen=True)
class Webhooks:
    """The provider's webhook events, as bytes it would send."""

    # The event telling that the effect of Answers.operation made under `key` took effect.
    effect: Callable[[str], bytes]
    # An event of a type the adapter does not act on.
    unread: bytes
    # An event of a type the adapter acts on, without the effect it is about.
    malformed: bytes


def recon_format(operation: str) -> Webhooks:
    """The webhooks of a provider that sends recon's own format (docs/contract.md,
    "Webhooks"), as the sandbox does."""

    def event(kind: str, effect: dict[str, Any]) -> bytes:
        return json.dumps({"id": "evt_kit", "type": kind, "data": {"effect": effect}}).encode()

    return Webhooks(
        effect=lambda key: event(
            "effect.succeeded",
            {
                "id": "eff_kit",
                "operation": operation,
                "idempotency_key": key,
                "metadata": {"op_key": key},
                "status": "succeeded",
            },
        ),
        unread=event("effect.deleted", {"id": "eff_kit"}),
        malformed=json.dumps({"id": "evt_kit", "type": "effect.succeeded", "data": {}}).encode(),
    )


@dataclass(frozen=True)
class ListingFacts:
    """What the kit needs to check a drift listing's window, paging and cut against the
    running provider. Optional: a target that gives none is not checked for them."""

    # Let this many seconds pass on the provider's clock (a fake's clock is moved on).
    wait: Callable[[float], Awaitable[None]]
    # Items on one page as the adapter asks for them, and the most effects one listing
    # reads before it is cut (its page cap times that): small, as the kit makes more.
    page_size: int
    most_listed: int
    # Whether the adapter declares that the provider lists newest first.
    newest_first: bool


@dataclass(frozen=True)
class RefusalFacts:
    """How to make the running provider refuse a request, and then stop refusing it: what
    the kit needs to check that a refused key sent again is refused again (docs/providers.md,
    the adapter table's `apply` row). Optional: a target that gives none is not checked
    for it.

    The refusal must come from the provider's state, not the payload alone (a card
    declined until it is funded, an item out of stock until it is restocked, an
    authorization revoked until it is reinstated): a provider that judges a resend afresh
    refuses a payload-bound refusal again too, and only a lifted cause tells the two apart.
    """

    operation: str
    # A fresh payload for `operation` that the provider refuses now (new resources each
    # call), made ready on the provider's side, never through the adapter under test.
    refused: Callable[[], Awaitable[dict[str, Any]]]
    # Lift the cause of the refusal of `payload`: the same request under a new key would
    # now be made.
    lift: Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class Live:
    """The adapter against the running provider, and the provider's own view of it."""

    adapter: ProviderAdapter
    operation: str
    # The provider's clock (a fake's may be moved): what a lookup's `Sent.at` is read on.
    now: Callable[[], datetime]
    # A fresh, valid payload for Answers.operation (new resources each call).
    payload: Callable[[], Awaitable[dict[str, Any]]]
    # The same request with another parameter.
    other: Callable[[dict[str, Any]], dict[str, Any]]
    # How many effects the provider holds under a key: counted on the provider's side,
    # never through the adapter under test.
    effects_under: Callable[[str], Awaitable[int]]
    # Make each apply take this long (the window for concurrent requests under a key).
    slow_down: Callable[[float], Awaitable[None]]
    # Move the provider's clock past its key retention (replay adapters only).
    expire_keys: Callable[[], None] | None = None
    listing: ListingFacts | None = None
    # Each kind of refusal the provider gives that recon may meet (a decline, a refusal
    # of an object's state): the kit checks each.
    refusals: tuple[RefusalFacts, ...] = ()


class KitTarget(Protocol):
    name: str
    answers: Answers
    webhooks: Webhooks
    # The webhook secret the provider signs with, and another valid one (not configured).
    secret: str
    other_secret: str

    def sign(self, secret: str, timestamp: int, body: bytes) -> dict[str, str]:
        """A delivery's headers, signed as the provider signs them."""
        ...

    def adapter_over(self, http: Requester) -> ProviderAdapter: ...

    def running(self) -> AbstractAsyncContextManager[Live]: ...


class Scripted:
    """A provider that answers every request with one status and body, or never
    (`lost`: the connection timed out, as a lost response looks to the adapter)."""

    def __init__(self, status: int = 200, body: bytes = b"", lost: bool = False) -> None:
        self.answer = Answer(status, body)
        self.lost = lost
        self.requests = 0

    async def request(self, method: str, url: str, **_: Any) -> Answer:
        self.requests += 1
        if self.lost:
            raise ProviderUnreachable(TimeoutError("no answer within the timeout"))
        return self.answer


def third_party_targets() -> list[KitTarget]:
    """The targets PROVIDER_KIT_TARGETS names (`module:attribute`, comma separated)."""
    targets: list[KitTarget] = []
    for spec in filter(None, os.environ.get(TARGETS_VARIABLE, "").split(",")):
        module, _, attribute = spec.strip().partition(":")
        targets.append(getattr(importlib.import_module(module), attribute))
    return targets
