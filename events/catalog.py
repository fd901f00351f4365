"""The operations an agent may ask for, with the side-effect class and reversibility the
retry policy and the policy gate rely on (DESIGN.md, "Retry policy" and "Governance")."""

from dataclasses import dataclass
from enum import StrEnum


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


CATALOG: dict[str, OperationInfo] = {
    info.name: info
    for info in (
        OperationInfo("payments.charge", SideEffect.WRITE, Reversibility.COMPENSATING_ONLY),
        OperationInfo("payments.refund", SideEffect.WRITE, Reversibility.IRREVERSIBLE),
        OperationInfo("inventory.reserve", SideEffect.WRITE, Reversibility.REVERSIBLE),
        OperationInfo("inventory.release", SideEffect.WRITE, Reversibility.REVERSIBLE),
        OperationInfo("email.send", SideEffect.WRITE, Reversibility.IRREVERSIBLE),
    )
}
