"""The provider adapter interface: everything recon asks of a provider, in one place
(docs/providers.md, "The adapter interface").

An adapter is found by name (services.providers.registry): its entry point in the
`recon.providers` group names an `AdapterClass`, whose declared facts (its webhook scheme,
its key retention) are read without making one, and whose `from_setup(ProviderSetup)`
makes the object with the methods of `ProviderAdapter`. Adding a provider is writing
such a class in any installed package; no file of recon changes.

What every adapter promises (the contract kit, tests/contract/provider_kit, checks it):
- `apply` sends the op key as the provider's idempotency key and puts it on the object it
  makes (metadata), so one id finds the effect from either side; one key, one effect.
- `classify` is the adapter's one judge of what an answer means: confirmed, a definitive
  refusal, the key reused with another payload, or unknown. Only a definitive refusal is
  `rejected`; anything that does not prove the effect absent for good is `unknown`.
- `lookup` never guesses: `absent` only when the provider proves it, `unavailable` when it
  could not be asked or cannot tell.
- `read_webhook` reads the provider's own events: the effect an event is about, the key
  recon made it under and what the event says of it; an event it does not act on is
  read as a type alone, a body it cannot read is a WebhookBodyError.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from events.catalog import OperationInfo
from events.observation import Seen
from reconcilers.drift import created_instant
from reconcilers.signatures import Scheme
from reconcilers.webhook_reading import WebhookReading
from services.providers.http import Requester


@dataclass(frozen=True)
class ProviderSetup:
    """What an adapter factory is given at start-up, from the configuration."""

    name: str  # the provider's name in recon (RECON_PROVIDERS)
    base_url: str
    http: Requester
    # The provider's API credential (RECON_PROVIDER_SECRETS), None when none is configured;
    # an adapter that needs one raises AdapterSetupError without it.
    secret: str | None = None
    # The adapter's clock, for the facts it judges by age (a key's retention); the real
    # one in production, a controlled one in tests.
    clock: Callable[[], datetime] | None = None
    # The provider file of a declared provider (RECON_PROVIDER_FILES), None for others.
    declaration: str | None = None
    # The drift listing's page cap (RECON_DRIFT_LIST_PAGES), None: the adapter's own. Only
    # for a class with a `max_list_pages` (services.config refuses it for any other).
    max_list_pages: int | None = None


@dataclass(frozen=True)
class Sent:
    """What recon knows of the first request sent under a key: a `replay` adapter resends
    exactly this payload, and only while `at` is inside the provider's key retention.
    `at` is a bound no later than the first send (the first attempt's dispatch time):
    judging retention from it errs towards "too old", never towards resending under a
    pruned key. A caller without such a bound passes no `Sent` at all."""

    payload: dict[str, Any]
    at: datetime


class AdapterSetupError(ValueError):
    """The adapter cannot work with this configuration (a missing credential, a bad URL):
    start-up stops with this message."""


class ListingUnavailable(RuntimeError):
    """The provider's list of effects could not be read; the drift scan tries next time."""


@dataclass(frozen=True)
class EffectListing:
    """What `list_effects` may answer instead of a bare list: the effects, and whether the
    listing is whole. A listing cut short (a page cap) holds the newest effects only, so a
    leg whose effect it does not list proves nothing unless the leg is newer than the cut
    (reconcilers.drift.compare judges "confirmed without effect" by `covered_from`)."""

    effects: list[Any]
    # None: every effect (since the `since` asked for, if any). An instant: the listing
    # was cut and holds every effect created after it, none of the older ones for sure.
    covered_from: datetime | None = None


def cut_listing(effects: list[Any]) -> EffectListing:
    """A newest-first listing cut after its last page: it covers from its oldest effect's
    `created_at` on (an effect at that very instant may have been left out with the older
    ones, so only what is after it is covered)."""
    instants = []
    for effect in effects:
        if not isinstance(effect, dict):
            continue  # not an effect: the scan refuses the listing (effect_from_json)
        try:
            instants.append(created_instant(effect))
        except (KeyError, ValueError):
            continue  # no instant to cut at (the scan refuses such a listing anyway)
    # Nothing readable: nothing is covered, so no absence is judged.
    return EffectListing(effects, min(instants, default=NOTHING_COVERED))


# The `covered_from` of a cut listing whose order is not known: every effect it left out
# may be any age, so it proves no leg's effect absent (its listed effects are judged).
NOTHING_COVERED = datetime.max.replace(tzinfo=UTC)


class ProviderAdapter(Protocol):
    # The operations this provider offers, by name, with the facts recon's rules read
    # (events.catalog.OperationInfo: class, reversibility, the one compensation allowed,
    # the payload's schema, its amount field). Known without I/O once the adapter is made:
    # the catalog recon serves and judges by is built from them.
    operations: Mapping[str, OperationInfo]
    # How the provider signs its webhooks: the intake checks every delivery with
    # reconcilers.signatures.verify under this scheme (or the one RECON_WEBHOOK_SCHEMES
    # names), so an adapter declares the scheme and has no check of its own.
    webhook_scheme: Scheme
    # The lookup strategy's declared fact: how long the provider replays a key's first
    # answer (seconds); None when lookups ask the provider by key instead (`query`).
    key_retention_s: float | None
    # Optional, so adapters written before strategies had names still conform: a
    # `lookup_strategy` attribute (services.providers.lookup_strategy.Strategy: query,
    # replay or none), read by lookup_strategy.strategy_of; without it an adapter with a
    # key retention replays and one without queries.

    async def apply(self, operation: str, op_key: str, payload: dict[str, Any]) -> Seen:
        """Make the effect under `op_key` (classified by `classify`); an answer that never
        came is `unknown`."""
        ...

    async def lookup(self, operation: str, op_key: str, sent: Sent | None = None) -> Seen:
        """What the provider holds under `op_key`: succeeded, absent (proven), unknown
        (known to the provider, not done) or unavailable. `sent`: the first request, when
        the caller has it (a `replay` adapter needs it to resend)."""
        ...

    def classify(self, operation: str, status: int, body: Any) -> Seen:
        """What an answer to `apply` means. Pure."""
        ...

    async def preview(self, operation: str, payload: dict[str, Any]) -> tuple[int | None, Any]:
        """What `operation` would do now, without doing it: the provider's status (None:
        unreachable; 501: the provider has no previews) and its answer."""
        ...

    async def balance(self, charge: str) -> tuple[int, Any]:
        """The provider's answer about a charge's refundable balance (status, body in the
        fields of services.providers.preconditions.BALANCE_FIELDS), for the precondition
        check before a new attempt; (0, error) when it could not be asked."""
        ...

    # Optional: `lists_since = True` declares that `list_effects` takes a keyword
    # `since` (an aware datetime) and then lists only the effects created at or after it;
    # the drift scan passes its account's cursor less the grace (reconcilers.drift_span) to
    # such adapters alone, so an adapter written before it (no argument) still conforms and
    # is asked for everything.

    async def list_effects(self) -> "list[Any] | EffectListing":
        """Every effect the provider lists, as reconcilers.drift.effect_from_json reads
        them (`id`, `operation`, `idempotency_key`, `payload`, `created_at`), for the
        drift scan; raises ListingUnavailable when the provider cannot answer. A bare list
        is taken as whole; an adapter that pages up to a cap answers an EffectListing,
        cut (`cut_listing`) when the cap left effects out."""
        ...

    def read_webhook(self, body: bytes) -> WebhookReading:
        """What one verified delivery says (reconcilers.webhook_reading): its event type,
        and an EffectNotice (the effect, the keys recon may know it under, most trusted
        first, and the outcome the event tells of the operation) when the event is about
        an effect this adapter's operations make; None for any other event, which is
        recorded as delivered and settles nothing. A body that is not one of the
        provider's events raises WebhookBodyError (a 400, nothing recorded): start from
        reconcilers.webhook_reading.load_body. Pure."""
        ...


class AdapterClass(Protocol):
    """What a `recon.providers` entry point names: the adapter's class (its facts are
    class attributes, read by the configuration before any adapter is made: the catalog is
    built from `operations` without making one)."""

    operations: Mapping[str, OperationInfo]
    webhook_scheme: Scheme
    key_retention_s: float | None

    def from_setup(self, setup: ProviderSetup) -> ProviderAdapter:
        """The adapter for one configured provider; AdapterSetupError when it cannot work
        with this configuration."""
        ...
