"""The webhook outbox: one persisted delivery per announced effect, in the sandbox's SQLite file.

A delivery row is inserted by `enqueue_delivery`, inside the transaction that records the
effect (see `SandboxStore(on_record=...)`), and updated by the sender after every attempt, so a
restart resumes exactly where the last process left off: at-least-once, never lost.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from services.devtools.sandbox.catalog import Operation
from services.devtools.sandbox.store import Effect, EffectHook, SandboxStore
from services.devtools.sandbox.webhook_config import RedeliveryPolicy

EVENT_TYPE = "effect.succeeded"


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # gave up after the redelivery policy's last attempt
    DROPPED = "dropped"  # the webhook_drop fault: deliberately never sent


@dataclass(frozen=True)
class Delivery:
    event_id: str
    effect_id: str
    operation: Operation
    body: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: float | None
    delivered_at: float | None
    last_error: str | None
    created_at: float

    def to_json(self) -> dict[str, Any]:
        """The shape listed by `GET /v1/webhooks/deliveries`."""
        return {
            "event_id": self.event_id,
            "effect_id": self.effect_id,
            "operation": self.operation.value,
            "status": self.status.value,
            "attempts": self.attempts,
            "next_attempt_at": _iso(self.next_attempt_at),
            "delivered_at": _iso(self.delivered_at),
            "last_error": self.last_error,
            "created_at": _iso(self.created_at),
            "event": json.loads(self.body),
        }


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return (
        datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def random_event_id() -> str:
    return f"evt_{secrets.token_hex(12)}"


def event_body(event_id: str, effect: Effect, created: int) -> str:
    """The webhook body; `data.effect` is exactly the effect as `GET /v1/effects` lists it."""
    event = {
        "id": event_id,
        "type": EVENT_TYPE,
        "created": created,
        "data": {"effect": effect.to_json()},
    }
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)


def delivery_enqueuer(
    new_event_id: Callable[[], str] = random_event_id, *, delay_s: float = 0.0
) -> EffectHook:
    """The `on_record` hook that puts one delivery per new effect in the outbox, its first
    attempt due `delay_s` after the effect becomes visible (`--webhook-delay-ms`)."""

    def enqueue(db: sqlite3.Connection, effect: Effect) -> None:
        event_id = new_event_id()
        # Due when the effect becomes visible: a `pending` effect is announced only once the
        # provider's own lookups would confirm it, as a real provider's webhook would be;
        # later by the delay, as a real provider's delivery queue announces it seconds later.
        db.execute(
            "INSERT INTO webhook_deliveries (event_id, effect_id, operation, body, status,"
            " attempts, next_attempt_at, created_at) VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
            (
                event_id,
                effect.id,
                effect.operation.value,
                event_body(event_id, effect, int(effect.visible_at)),
                DeliveryStatus.PENDING.value,
                effect.visible_at + delay_s,
                effect.visible_at,
            ),
        )

    return enqueue


class WebhookOutbox:
    def __init__(self, store: SandboxStore) -> None:
        self._store = store

    def due(self, now: float) -> tuple[list[Delivery], float | None]:
        """The deliveries to attempt at `now`, soonest first, and when the soonest of the
        other pending ones is due (None: no other). Only those, by the (status,
        next_attempt_at) index: with webhooks sent seconds late (`--webhook-delay-ms`)
        hundreds wait, and reading every pending row at each effect's wake-up took the
        sandbox from 6 to 12 ms of CPU per benchmark transaction at a 5 s delay."""
        pending = DeliveryStatus.PENDING.value
        with self._store.reading() as db:
            rows = db.execute(
                "SELECT * FROM webhook_deliveries WHERE status = ?"
                " AND (next_attempt_at IS NULL OR next_attempt_at <= ?)"
                " ORDER BY next_attempt_at, seq",
                (pending, now),
            ).fetchall()
            (later,) = db.execute(
                "SELECT min(next_attempt_at) FROM webhook_deliveries"
                " WHERE status = ? AND next_attempt_at > ?",
                (pending, now),
            ).fetchone()
        return [_delivery_from_row(r) for r in rows], later

    def get(self, event_id: str) -> Delivery | None:
        with self._store.reading() as db:
            row = db.execute(
                "SELECT * FROM webhook_deliveries WHERE event_id = ?", (event_id,)
            ).fetchone()
        return None if row is None else _delivery_from_row(row)

    def find(
        self, effect_id: str | None = None, status: DeliveryStatus | None = None
    ) -> list[Delivery]:
        """Every delivery, oldest first, optionally for one effect or in one status."""
        query, args = "SELECT * FROM webhook_deliveries WHERE 1 = 1", list[str]()
        if effect_id is not None:
            query, args = query + " AND effect_id = ?", [*args, effect_id]
        if status is not None:
            query, args = query + " AND status = ?", [*args, status.value]
        with self._store.reading() as db:
            rows = db.execute(query + " ORDER BY seq", args).fetchall()
        return [_delivery_from_row(r) for r in rows]

    def mark_dropped(self, event_id: str) -> None:
        with self._store.transaction() as db:
            db.execute(
                "UPDATE webhook_deliveries SET status = ?, next_attempt_at = NULL"
                " WHERE event_id = ? AND status = ?",
                (DeliveryStatus.DROPPED.value, event_id, DeliveryStatus.PENDING.value),
            )

    def record_attempt(
        self, event_id: str, *, ok: bool, error: str | None, policy: RedeliveryPolicy
    ) -> Delivery:
        """Count one attempt and decide what comes next, in one transaction.

        A delivered webhook stays delivered whatever a later duplicate or replay meets; a
        successful replay does settle a failed or dropped one. Only a pending delivery is
        rescheduled or given up on.
        """
        with self._store.transaction() as db:
            now = self._store.clock()
            row = db.execute(
                "SELECT * FROM webhook_deliveries WHERE event_id = ?", (event_id,)
            ).fetchone()
            current = _delivery_from_row(row)
            attempts = current.attempts + 1
            status, next_at, delivered_at = (
                current.status,
                current.next_attempt_at,
                current.delivered_at,
            )
            if ok and status is not DeliveryStatus.DELIVERED:
                status, next_at, delivered_at = DeliveryStatus.DELIVERED, None, now
            elif not ok and status is DeliveryStatus.PENDING:
                delay = policy.delay_after(attempts)
                if delay is None:
                    status, next_at = DeliveryStatus.FAILED, None
                else:
                    next_at = now + delay
            db.execute(
                "UPDATE webhook_deliveries SET status = ?, attempts = ?, next_attempt_at = ?,"
                " delivered_at = ?, last_error = ? WHERE event_id = ?",
                (status.value, attempts, next_at, delivered_at, error, event_id),
            )
            updated = db.execute(
                "SELECT * FROM webhook_deliveries WHERE event_id = ?", (event_id,)
            ).fetchone()
        return _delivery_from_row(updated)


def _delivery_from_row(row: sqlite3.Row) -> Delivery:
    return Delivery(
        event_id=row["event_id"],
        effect_id=row["effect_id"],
        operation=Operation(row["operation"]),
        body=row["body"],
        status=DeliveryStatus(row["status"]),
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        delivered_at=row["delivered_at"],
        last_error=row["last_error"],
        created_at=row["created_at"],
    )
