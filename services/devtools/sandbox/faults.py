"""Fault injection: which failure the next calls of an operation, or the next webhooks, suffer.

Faults live in memory on purpose: they are a test's control knob for this process, not
provider state, so a restart disarms them (like `DELETE /v1/faults`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.devtools.sandbox.catalog import Operation


class FaultMode(StrEnum):
    # The effect is committed, then the response never arrives: the client sees a timeout and
    # must not conclude "failed". The case idempotency keys and lookups exist for.
    LOSE_RESPONSE_AFTER_COMMIT = "lose_response_after_commit"
    ERROR_500_AFTER_COMMIT = "error_500_after_commit"
    ERROR_500_BEFORE_COMMIT = "error_500_before_commit"
    DELAY = "delay"
    # Answer 202; the effect shows up in lookups and listings only after `delay_ms`.
    PENDING = "pending"
    # Lookups by key answer 503, so reconcilers must back off instead of reading absence.
    LOOKUP_UNAVAILABLE = "lookup_unavailable"
    # Webhook faults count deliveries (not calls) and act on a webhook's first delivery only;
    # `operation`, optional, limits them to the webhooks of that operation's effects.
    # Deliver twice: same event id, same body (what at-least-once delivery looks like).
    WEBHOOK_DUPLICATE = "webhook_duplicate"
    # Hold for `delay_ms`: the webhook arrives after the response, or after the transaction ended.
    WEBHOOK_DELAY = "webhook_delay"
    # Never deliver: recon must learn of the effect from its own lookups or the drift scan.
    WEBHOOK_DROP = "webhook_drop"
    # Hold, then release the held deliveries in reverse order `delay_ms` after the first.
    WEBHOOK_REORDER = "webhook_reorder"


WEBHOOK_MODES = frozenset(
    {
        FaultMode.WEBHOOK_DUPLICATE,
        FaultMode.WEBHOOK_DELAY,
        FaultMode.WEBHOOK_DROP,
        FaultMode.WEBHOOK_REORDER,
    }
)
# The modes that may leave `operation` out: lookups and deliveries can be broken wholesale.
_OPERATION_OPTIONAL = WEBHOOK_MODES | {FaultMode.LOOKUP_UNAVAILABLE}
_CALL_MODES = frozenset(FaultMode) - _OPERATION_OPTIONAL


class FaultSpec(BaseModel):
    """The body of `POST /v1/faults`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    operation: Operation | None = None
    mode: FaultMode
    times: int = Field(default=1, ge=1)
    delay_ms: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _operation_required_for_calls(self) -> Self:
        # A lookup or webhook fault may target all of them; a call fault must name whose calls
        # it breaks.
        if self.operation is None and self.mode not in _OPERATION_OPTIONAL:
            raise ValueError(f"'operation' is required for mode {self.mode.value!r}")
        return self


class ArmedFault(BaseModel):
    model_config = ConfigDict(frozen=True)

    operation: Operation | None
    mode: FaultMode
    remaining: int
    delay_ms: int


class FaultBoard:
    """Armed faults, consumed one call at a time in the order they were armed."""

    def __init__(self) -> None:
        # Handlers run on the event loop, but the lock keeps this safe from worker threads too.
        self._lock = threading.Lock()
        self._armed: list[ArmedFault] = []

    def arm(self, spec: FaultSpec) -> ArmedFault:
        fault = ArmedFault(
            operation=spec.operation,
            mode=spec.mode,
            remaining=spec.times,
            delay_ms=spec.delay_ms,
        )
        with self._lock:
            self._armed.append(fault)
        return fault

    def clear(self) -> int:
        with self._lock:
            count = len(self._armed)
            self._armed.clear()
        return count

    def armed(self) -> list[ArmedFault]:
        with self._lock:
            return list(self._armed)

    def take_call_fault(self, operation: Operation) -> ArmedFault | None:
        """Consume one use of the first call fault armed for `operation`, if any."""
        return self._take(lambda f: f.mode in _CALL_MODES and f.operation is operation)

    def take_delivery_fault(self, operation: Operation) -> ArmedFault | None:
        """Consume one use of the first webhook fault that applies to a webhook of `operation`."""
        return self._take(
            lambda f: f.mode in WEBHOOK_MODES and (f.operation is None or f.operation is operation)
        )

    def take_lookup_fault(self, operation: Operation | None) -> ArmedFault | None:
        """Consume one use of the first lookup fault that applies.

        `operation` is that of whatever the key names, or None for an unknown key; a fault armed
        for an operation still hits unknown keys, since the provider can't know what they were.
        """
        return self._take(
            lambda f: (
                f.mode is FaultMode.LOOKUP_UNAVAILABLE
                and (f.operation is None or operation is None or f.operation is operation)
            )
        )

    def _take(self, matches: Callable[[ArmedFault], bool]) -> ArmedFault | None:
        with self._lock:
            for index, fault in enumerate(self._armed):
                if matches(fault):
                    if fault.remaining <= 1:
                        del self._armed[index]
                    else:
                        self._armed[index] = fault.model_copy(
                            update={"remaining": fault.remaining - 1}
                        )
                    return fault
        return None
