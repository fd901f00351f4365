"""Drift: disagreement between a provider's list of effects and recon's ledger.

Drift is not a transaction's state transition (an effect without an intent has no
transaction), so it travels on its own topic, recon.drift, keyed by its id. The id is
derived from what was found, so a drift seen again by the next scan, by a second scanner
or by a webhook is the same report, and is reported once.
"""

from typing import Any, Literal

from events.keys import drift_id as drift_id
from events.model import Message
from events.str_enum import StrEnum


class DriftKind(StrEnum):
    EFFECT_WITHOUT_INTENT = "effect_without_intent"  # the provider did something nobody asked
    INTENT_WITHOUT_EFFECT = "intent_without_effect"  # recon holds it confirmed; provider has none
    MISMATCH = "mismatch"  # both exist, but amount or payload differ
    # The provider holds an effect under the key of an operation recon ended `failed`
    # (refused, or resolved `not_applied`): a charge the customer paid that recon calls
    # failed. Extends docs/contract.md's three kinds compatibly.
    EFFECT_AFTER_FAILURE = "effect_after_failure"


class DriftDetected(Message):
    type: Literal["DriftDetected"] = "DriftDetected"
    schema_version: Literal[1] = 1
    drift_id: str
    kind: DriftKind
    provider: str
    # Known when the drift concerns one of recon's operations; None for an effect that
    # matches no intent at all.
    tenant: str | None = None
    tx_id: str | None = None
    action: str | None = None
    op_key: str | None = None
    effect_id: str | None = None
    detail: dict[str, Any]
    detected_at: str
