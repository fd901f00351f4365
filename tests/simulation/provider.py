"""A simulated sandbox provider: idempotency keys (that expire), effects, every call and
lookup fault of services.devtools.sandbox.faults, and webhooks with theirs.

It answers with what the real sandbox answers (status code and JSON body), so the
call plan's real classification reads it. It counts every call that APPLIED an effect per
key, not the effects it deduplicated: sending twice under a key it has forgotten applies
twice, and the invariants see it. It also counts every call that reached it, applied or
not: a destructive operation sent twice under one key is harm even when deduplicated.

With `afresh` (World.afresh) it keeps no decline under its key: a declined key sent again
is judged afresh, and made (the card works now), as some providers do.
"""

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

Answer = tuple[int, dict[str, Any]] | None  # None: the response never arrived


class CallFault(StrEnum):
    LOSE_RESPONSE_AFTER_COMMIT = "lose_response_after_commit"
    ERROR_500_AFTER_COMMIT = "error_500_after_commit"
    ERROR_500_BEFORE_COMMIT = "error_500_before_commit"
    DELAY = "delay"  # past the client's timeout: committed, the caller sees a timeout
    PENDING = "pending"


class HookFault(StrEnum):
    DUPLICATE = "webhook_duplicate"
    DELAY = "webhook_delay"
    DROP = "webhook_drop"
    REORDER = "webhook_reorder"  # held, released later than deliveries made after it


# How long the sandbox remembers an idempotency key (Stripe: 24 h), in simulated ms.
KEY_TTL_MS = 24 * 3600 * 1000


@dataclass
class Effect:
    id: str
    key: str
    operation: str
    status: str  # "succeeded" | "pending"
    visible_at: int
    created_at: int


@dataclass
class Delivery:
    due: int
    delivery_id: str
    body: bytes


@dataclass
class Provider:
    rng: random.Random
    # Chances per call / lookup / webhook while faults are on; 0 once they heal.
    call_fault_rate: float
    lookup_fault_rate: float
    hook_fault_rate: float
    faulty: bool = True
    keys: dict[str, tuple[int, int, dict[str, Any]]] = field(default_factory=dict)
    effects: dict[str, Effect] = field(default_factory=dict)  # by key, while remembered
    applies: Counter[str] = field(default_factory=Counter)
    applied: list[tuple[int, str]] = field(default_factory=list)  # (time, key), in order
    # Every call that reached the provider, applied or not, per key and in order: for a
    # destructive operation the count of calls, not only of effects, is the promise.
    calls: Counter[str] = field(default_factory=Counter)
    sent: list[str] = field(default_factory=list)
    outbox: list[Delivery] = field(default_factory=list)
    serial: int = 0
    # Declines are not kept under their keys (module docstring): the keys declined once.
    afresh: bool = False
    declined: set[str] = field(default_factory=set)

    def _forget_expired(self, key: str, now: int) -> None:
        known = self.keys.get(key)
        if known is not None and now - known[0] >= KEY_TTL_MS:
            del self.keys[key]
            self.effects.pop(key, None)

    def apply(self, now: int, operation: str, key: str, payload: dict[str, Any]) -> Answer:
        self.calls[key] += 1
        self.sent.append(key)
        self._forget_expired(key, now)
        known = self.keys.get(key)
        if known is not None:
            return known[1], known[2]  # the idempotent replay of the first answer
        fault = self._call_fault()
        if fault is CallFault.ERROR_500_BEFORE_COMMIT:
            return 500, {"error": "internal_error"}
        if payload.get("decline") and not (self.afresh and key in self.declined):
            answer: tuple[int, dict[str, Any]] = (402, {"error": "card_declined"})
            if self.afresh:
                self.declined.add(key)
            else:
                self.keys[key] = (now, *answer)
            return answer
        self.serial += 1
        pending = fault is CallFault.PENDING
        effect = Effect(
            id=f"eff_{self.serial}",
            key=key,
            operation=operation,
            status="pending" if pending else "succeeded",
            visible_at=now + (self.rng.randint(500, 8000) if pending else 0),
            created_at=now,
        )
        self.effects[key] = effect
        self.applies[key] += 1
        self.applied.append((now, key))
        body = {"id": effect.id, "status": effect.status, "idempotency_key": key}
        answer = (202, body) if pending else (200, body)
        self.keys[key] = (now, *answer)
        self._announce(effect)
        if fault is CallFault.ERROR_500_AFTER_COMMIT:
            return 500, {"error": "internal_error"}
        if fault in (CallFault.LOSE_RESPONSE_AFTER_COMMIT, CallFault.DELAY):
            return None
        return answer

    def lookup(self, now: int, key: str) -> tuple[int, dict[str, Any]]:
        self._forget_expired(key, now)
        if self.faulty and self.rng.random() < self.lookup_fault_rate:
            return 503, {"error": "lookup_unavailable"}
        effect = self.effects.get(key)
        if effect is None or effect.visible_at > now:
            return 200, {"effects": []}
        return 200, {"effects": [self._public(effect, now)]}

    def holds(self, key: str) -> bool:
        """Ground truth for a simulated operator: was an effect ever applied under key."""
        return self.applies[key] > 0

    def _public(self, effect: Effect, now: int) -> dict[str, Any]:
        status = "succeeded" if effect.visible_at <= now else effect.status
        return {
            "id": effect.id,
            "status": status,
            "idempotency_key": effect.key,
            "metadata": {"op_key": effect.key},
        }

    def _call_fault(self) -> CallFault | None:
        if not self.faulty or self.rng.random() >= self.call_fault_rate:
            return None
        return self.rng.choice(list(CallFault))

    def _announce(self, effect: Effect) -> None:
        """Queue the effect.succeeded webhook, through the webhook faults."""
        body = json.dumps(
            {
                "type": "effect.succeeded",
                "data": {"effect": {**self._public(effect, effect.visible_at)}},
            }
        ).encode()
        due = effect.visible_at + self.rng.randint(0, 300)
        delivery_id = f"evt_{effect.id}"
        fault = None
        if self.faulty and self.rng.random() < self.hook_fault_rate:
            fault = self.rng.choice(list(HookFault))
        if fault is HookFault.DROP:
            return
        if fault is HookFault.DUPLICATE:
            self.outbox.append(Delivery(due + self.rng.randint(0, 2000), delivery_id, body))
        if fault in (HookFault.DELAY, HookFault.REORDER):
            due += self.rng.randint(2000, 30000)
        self.outbox.append(Delivery(due, delivery_id, body))

    def due_deliveries(self, now: int) -> list[int]:
        return [i for i, d in enumerate(self.outbox) if d.due <= now]
