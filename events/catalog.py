"""The vocabulary of the catalog: what recon's rules read of an operation (its side-effect
class, its reversibility, the one undo it allows, its payload's schema, its amount field),
and `Catalog`, the operations of the configured providers.

No operation is named here: every provider declares its own (`ProviderAdapter.operations`;
the sandbox's in services.providers.sandbox_operations, Stripe's in
services.providers.stripe.operations), and the catalog recon serves and judges by is built
from the providers configured (services.providers.registry.catalog_of). What the decider
reads of an operation is recorded on the events when it is submitted (`OperationFacts`), so
a replay never depends on the configuration of the day (docs/design.md, "Retry policy" and
"Governance")."""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from events.model import Message
from events.str_enum import StrEnum

# How long a natural key (events.intent_identity) keeps a second submission of the same
# business intent from the provider, unless the operation declares otherwise: longer than an
# agent's re-planning after a crash (minutes to days) and than a month's billing cycle, the
# horizon over which a person would still call a second charge for one order a duplicate.
DEFAULT_NATURAL_KEY_WINDOW_S = 30 * 24 * 3600


class SideEffect(StrEnum):
    READ = "read"  # retried freely
    WRITE = "write"  # retried only under the same key, after a lookup
    DESTRUCTIVE = "destructive"  # never retried automatically; needs approval


class Reversibility(StrEnum):
    REVERSIBLE = "reversible"  # an undo restores the world as it was
    COMPENSATING_ONLY = "compensating_only"  # an undo exists but leaves a trace (a refund)
    IRREVERSIBLE = "irreversible"  # once sent, it stays sent


class Classified(Protocol):
    """Anything that says an operation's class and reversibility: the retry policy and the
    approval rule read only these (an OperationInfo, or the OperationFacts an event
    recorded)."""

    @property
    def side_effect(self) -> SideEffect: ...

    @property
    def reversibility(self) -> Reversibility: ...


class OperationFacts(Message):
    """What the decider reads of one operation, recorded on the events when the intake
    accepts it (OperationSpec.facts, Compensation.facts, OperationDispatched.facts): the
    provider's declaration of that day, so a replay decides as the live run did whatever the
    configuration says now."""

    side_effect: SideEffect
    reversibility: Reversibility


# What an operation nobody declared is taken for: the intake refuses such operations, so
# this only covers a catalog shrunk under a live transaction. The safe reading of an
# operation nobody declared is the one never sent twice.
UNDECLARED = OperationFacts(
    side_effect=SideEffect.DESTRUCTIVE, reversibility=Reversibility.IRREVERSIBLE
)


@dataclass(frozen=True)
class OperationInfo:
    name: str
    side_effect: SideEffect
    reversibility: Reversibility
    # The one operation this one allows as a step's compensation (its undo), or None (it
    # has none). An agent may not pick it: the compensation of a reserve is the release of
    # that reservation, never another call sent under the step's grant (events.compensation).
    compensation: str | None = None
    # The JSON Schema (an object schema) a step's payload must satisfy, checked at the
    # door (events.payload_check); None: the provider declared none.
    payload_schema: Mapping[str, Any] | None = None
    # The payload field holding the amount (integer minor units) quotas count; None: the
    # operation moves no money.
    amount_field: str | None = None
    # How the undo's payload is built from the confirmed step (events.compensation): each
    # undo field from `$remote_id` (the provider's id of the confirmed effect), `$op_key`
    # (the step's key) or a JSON pointer into the step's payload (`/currency`). None: the
    # step's payload with `reverses` (the sandbox's undos read it so).
    undo_payload: Mapping[str, str] | None = None
    # How long a step's natural key is held for this operation (events.intent_identity):
    # within it, another tx_id naming the same key never reaches the provider.
    natural_key_window_s: int = DEFAULT_NATURAL_KEY_WINDOW_S

    # Made once per declared operation (a frozen model, shared): a submission reads an
    # operation's facts a dozen times (its checks, its grants, its specs).
    @cached_property
    def facts(self) -> OperationFacts:
        return OperationFacts(side_effect=self.side_effect, reversibility=self.reversibility)


class Catalog:
    """The operations of each configured provider, by provider and name. Pure: built once
    from what the adapters declare (services.providers.registry.catalog_of); the intake's
    door, the policy gate, GET /v1/catalog and the OpenAPI document all read this one."""

    def __init__(self, providers: Mapping[str, Mapping[str, OperationInfo]]) -> None:
        self._providers = {name: dict(ops) for name, ops in sorted(providers.items())}

    def providers(self) -> tuple[str, ...]:
        return tuple(self._providers)

    def operations(self, provider: str) -> Mapping[str, OperationInfo]:
        """`provider`'s operations; empty for a provider not configured."""
        return self._providers.get(provider, {})

    def info(self, provider: str, operation: str) -> OperationInfo | None:
        return self._providers.get(provider, {}).get(operation)

    def facts(self, provider: str, operation: str) -> OperationFacts:
        """The facts of `operation` at `provider`; UNDECLARED when it declares none."""
        info = self.info(provider, operation)
        return info.facts if info is not None else UNDECLARED

    def compensation_of(self, provider: str, operation: str) -> str | None:
        """The one undo `operation` at `provider` allows, None when it has none."""
        info = self.info(provider, operation)
        return info.compensation if info is not None else None

    def names(self) -> tuple[str, ...]:
        """Every operation name some provider declares, sorted, each once."""
        return tuple(sorted({name for ops in self._providers.values() for name in ops}))

    def side_effect_of(self, operation: str) -> SideEffect:
        """The class of an operation named without its provider (a policy names operations
        by name only): the most dangerous any provider declares for the name, `destructive`
        when none does, so a grant is never implied by a provider that reads what another
        writes."""
        order = list(SideEffect)
        classes = [
            ops[operation].side_effect for ops in self._providers.values() if operation in ops
        ]
        return max(classes, key=order.index) if classes else UNDECLARED.side_effect

    def __iter__(self) -> Iterator[tuple[str, OperationInfo]]:
        """Every (provider, operation) once, providers and operations in a stable order."""
        for provider, ops in self._providers.items():
            for info in ops.values():
                yield provider, info
