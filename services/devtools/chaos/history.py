"""What a chaos run collected, as plain data: the input of the pure checks (checks.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Submitted:
    """One intent the workload sent, and whether the intake ever answered it 2xx."""

    tx_id: str
    kind: str
    answered_2xx: bool


@dataclass(frozen=True)
class ProviderEffect:
    """An effect the provider holds. `applied_calls` counts the calls that applied it
    (recorded a new effect, as opposed to replaying the idempotent answer)."""

    effect_id: str
    operation: str
    idempotency_key: str
    created_at: datetime
    applied_calls: int = 1


@dataclass(frozen=True)
class DriftReport:
    drift_id: str
    kind: str
    effect_id: str | None
    op_key: str | None


@dataclass(frozen=True)
class History:
    submitted: tuple[Submitted, ...]
    # Every committed recon.events envelope (as JSON objects), per tx_id, in log order.
    events: dict[str, tuple[dict[str, Any], ...]]
    effects: tuple[ProviderEffect, ...]
    drift: tuple[DriftReport, ...] = ()
    # `audit verify` and `audit rebuild --compare`: exit code 0, and what they printed.
    audit_verify_ok: bool = True
    audit_verify_output: str = ""
    rebuild_compare_ok: bool = True
    rebuild_compare_output: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
