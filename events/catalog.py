"""The operations an agent may ask for, with the side-effect class and reversibility the
retry policy and the policy gate rely on (docs/design.md, "Retry policy" and "Governance")."""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

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
    # door; None: the provider declared none.
    payload_schema: Mapping[str, Any] | None = None
    # The payload field holding the amount (integer minor units) quotas count; None: the
    # operation moves no money.
    amount_field: str | None = None
    # How long a step's natural key is held for this operation (events.intent_identity):
    # within it, another tx_id naming the same key never reaches the provider.
    natural_key_window_s: int = DEFAULT_NATURAL_KEY_WINDOW_S


CATALOG: dict[str, OperationInfo] = {
    info.name: info
    for info in (
        OperationInfo(
            "payments.charge",
            SideEffect.WRITE,
            Reversibility.COMPENSATING_ONLY,
            compensation="payments.refund",
        ),
        OperationInfo("payments.refund", SideEffect.WRITE, Reversibility.IRREVERSIBLE),
        OperationInfo(
            "inventory.reserve", SideEffect.WRITE, Reversibility.REVERSIBLE, "inventory.release"
        ),
        OperationInfo("inventory.release", SideEffect.WRITE, Reversibility.REVERSIBLE),
        OperationInfo("email.send", SideEffect.WRITE, Reversibility.IRREVERSIBLE),
        # Moves a user up a class waitlist, displacing (and notifying) the one ahead: its
        # compensation puts the positions back, but the displaced user was told (seed 003).
        OperationInfo(
            "waitlist.promote",
            SideEffect.DESTRUCTIVE,
            Reversibility.COMPENSATING_ONLY,
            compensation="waitlist.restore",
        ),
        OperationInfo("waitlist.restore", SideEffect.WRITE, Reversibility.COMPENSATING_ONLY),
        OperationInfo("records.delete", SideEffect.DESTRUCTIVE, Reversibility.IRREVERSIBLE),
    )
}

# Per provider: a provider whose operation behaves differently from the default (a charge
# that cannot be refunded, a delete with a trash can) declares it here. Every configured
# provider speaks the sandbox's API today, so every name falls back to CATALOG.
PROVIDER_CATALOGS: dict[str, dict[str, OperationInfo]] = {"sandbox": CATALOG}

# What an operation missing from every catalog is taken for: intake refuses unknown
# operations, so this only covers a catalog shrunk under a live transaction. The safe
# reading of an operation nobody declared is the one never sent twice.
UNDECLARED = (SideEffect.DESTRUCTIVE, Reversibility.IRREVERSIBLE)


def operation_info(provider: str, operation: str) -> OperationInfo:
    """The class and reversibility of `operation` at `provider`: the one place the retry
    policy, the approval gate and the API read them from."""
    info = PROVIDER_CATALOGS.get(provider, CATALOG).get(operation) or CATALOG.get(operation)
    return info or OperationInfo(operation, *UNDECLARED)
