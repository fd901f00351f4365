"""SQLite storage of effects and idempotency records.

Invariants the sandbox's callers rely on:
- one idempotency record per key, for the whole provider (not per operation), bound to the
  fingerprint of the payload it first came with;
- at most one effect per key, written in the same SQLite transaction as its idempotency record,
  so no crash can leave an effect without its key or a key pointing at nothing;
- a definitive refusal is remembered under its key too, with no effect.
Writes are serialised twice: a process-wide lock for this connection, and `BEGIN IMMEDIATE`
so a second process on the same file waits instead of racing.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from services.devtools.sandbox import domain
from services.devtools.sandbox.balances import refund_refusal
from services.devtools.sandbox.catalog import Operation, Refusal, refusal_for
from services.devtools.sandbox.fingerprint import canonical_json, payload_fingerprint

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    operation TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    payload TEXT NOT NULL,
    metadata TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    -- epoch seconds; a `pending` effect exists but stays out of lookups until then
    visible_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS effects_by_operation ON effects (operation, seq);
-- the drift scan's window (`GET /v1/effects?created_gte=`)
CREATE INDEX IF NOT EXISTS effects_by_created ON effects (created_at);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key TEXT PRIMARY KEY,
    operation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status_code INTEGER NOT NULL,
    response TEXT NOT NULL,
    effect_id TEXT REFERENCES effects (id),
    created_at TEXT NOT NULL
);
-- The webhook outbox: a row is written in the same transaction as its effect, so no crash can
-- leave an effect that will never be announced. Rows are sent and updated by outbound.py.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    effect_id TEXT NOT NULL REFERENCES effects (id),
    operation TEXT NOT NULL,
    -- the exact bytes sent on every attempt, so redeliveries and replays are identical
    body TEXT NOT NULL,
    -- pending | delivered | failed (gave up) | dropped (the webhook_drop fault)
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    -- epoch seconds; NULL once nothing more is scheduled
    next_attempt_at REAL,
    delivered_at REAL,
    last_error TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
"""


@dataclass(frozen=True)
class Effect:
    id: str
    operation: Operation
    idempotency_key: str
    payload: dict[str, Any]
    metadata: dict[str, Any]
    status: str
    created_at: str
    visible_at: float

    def to_json(self) -> dict[str, Any]:
        """The public shape listed by `GET /v1/effects`."""
        return {
            "id": self.id,
            "operation": self.operation.value,
            "idempotency_key": self.idempotency_key,
            "payload": self.payload,
            "metadata": self.metadata,
            "status": self.status,
            "created_at": self.created_at,
        }


class Outcome(StrEnum):
    RECORDED = "recorded"  # a new effect was committed
    REFUSED = "refused"  # a new definitive refusal was committed, no effect
    REPLAYED = "replayed"  # the key was known with this payload: the original answer
    KEY_REUSED = "key_reused"  # the key was known with another payload: nothing changed


@dataclass(frozen=True)
class Submission:
    outcome: Outcome
    status_code: int
    body: dict[str, Any]
    effect: Effect | None


def _utc_iso(epoch: float) -> str:
    return (
        datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def random_effect_id(operation: Operation) -> str:
    return f"{operation.id_prefix}_{secrets.token_hex(12)}"


def succeeded_body(effect: Effect) -> dict[str, Any]:
    return {
        "id": effect.id,
        "status": "succeeded",
        "operation": effect.operation.value,
        "idempotency_key": effect.idempotency_key,
        "payload": effect.payload,
        "created_at": effect.created_at,
    }


def pending_body(effect: Effect) -> dict[str, Any]:
    return {**succeeded_body(effect), "status": "pending"}


# Called inside the transaction that records an effect (the webhook outbox's enqueue).
EffectHook = Callable[[sqlite3.Connection, Effect], None]


class SandboxStore:
    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[Operation], str] = random_effect_id,
        on_record: EffectHook | None = None,
    ) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._new_id = new_id
        self._on_record = on_record
        self._lock = threading.Lock()
        # One connection shared by worker threads, guarded by _lock; autocommit mode so that
        # transactions are exactly the explicit BEGIN IMMEDIATE ... COMMIT below.
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(_SCHEMA + domain.SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; other modules' tables (the webhook outbox) use it too."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads, serialised with the writes of this process."""
        with self._lock:
            yield self._db

    def submit(
        self,
        operation: Operation,
        key: str,
        payload: dict[str, Any],
        metadata: dict[str, Any],
        *,
        pending_ms: int | None = None,
    ) -> Submission:
        """Apply one call under its idempotency key, atomically.

        `pending_ms` (the `pending` fault) records the effect now but keeps it out of lookups and
        listings for that long, and answers 202.
        """
        fingerprint = payload_fingerprint(payload)
        with self.transaction() as db:
            now = self._clock()
            row = db.execute("SELECT * FROM idempotency_keys WHERE key = ?", (key,)).fetchone()
            if row is not None:
                return self._replay(db, row, operation, fingerprint, now)

            # A refund is also held to its charge's balance (seed 004, balances.py).
            refusal = refusal_for(operation, payload) or refund_refusal(db, operation, payload)
            # A stateful operation (domain.py) is refused or changed by the state it finds.
            change = None if refusal is not None else domain.compute(db, operation, payload)
            if isinstance(change, Refusal):
                refusal, change = change, None
            if refusal is not None:
                body: dict[str, Any] = {
                    "error": refusal.error,
                    "message": refusal.message,
                    "operation": operation.value,
                    "idempotency_key": key,
                }
                self._remember(
                    db, key, operation, fingerprint, refusal.status_code, body, None, now
                )
                return Submission(Outcome.REFUSED, refusal.status_code, body, None)

            effect = Effect(
                id=self._new_id(operation),
                operation=operation,
                idempotency_key=key,
                payload=payload,
                metadata=metadata,
                status="succeeded",
                created_at=_utc_iso(now),
                visible_at=now + (pending_ms or 0) / 1000,
            )
            db.execute(
                "INSERT INTO effects (id, operation, idempotency_key, payload, metadata, status,"
                " created_at, visible_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    effect.id,
                    operation.value,
                    key,
                    canonical_json(payload),
                    canonical_json(metadata),
                    effect.status,
                    effect.created_at,
                    effect.visible_at,
                ),
            )
            if pending_ms is None:
                status_code, body = 200, succeeded_body(effect)
            else:
                status_code, body = 202, pending_body(effect)
            if change is not None:
                change.write(db, effect.id, key)
                body = {**body, "result": change.public()}
            self._remember(db, key, operation, fingerprint, status_code, body, effect.id, now)
            if self._on_record is not None:
                self._on_record(db, effect)
            return Submission(Outcome.RECORDED, status_code, body, effect)

    def _replay(
        self,
        db: sqlite3.Connection,
        row: sqlite3.Row,
        operation: Operation,
        fingerprint: str,
        now: float,
    ) -> Submission:
        if row["fingerprint"] != fingerprint or row["operation"] != operation.value:
            body = {
                "error": "idempotency_key_reused",
                "message": f"Idempotency-Key {row['key']!r} was first used for "
                f"{row['operation']} with a different payload; nothing was done. Use a new key "
                "for a new request, or resend the original payload to get the original answer.",
                "idempotency_key": row["key"],
                "original_operation": row["operation"],
            }
            return Submission(Outcome.KEY_REUSED, 409, body, None)
        effect = None
        if row["effect_id"] is not None:
            effect_row = db.execute(
                "SELECT * FROM effects WHERE id = ?", (row["effect_id"],)
            ).fetchone()
            effect = _effect_from_row(effect_row)
        status_code: int = row["status_code"]
        body = json.loads(row["response"])
        # A pending answer is replayed as pending until the effect settles; after that the
        # replay tells the truth a client would now get from the provider.
        if status_code == 202 and effect is not None and effect.visible_at <= now:
            status_code, body = 200, succeeded_body(effect)
        return Submission(Outcome.REPLAYED, status_code, body, effect)

    @staticmethod
    def _remember(
        db: sqlite3.Connection,
        key: str,
        operation: Operation,
        fingerprint: str,
        status_code: int,
        body: dict[str, Any],
        effect_id: str | None,
        now: float,
    ) -> None:
        db.execute(
            "INSERT INTO idempotency_keys (key, operation, fingerprint, status_code, response,"
            " effect_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                operation.value,
                fingerprint,
                status_code,
                canonical_json(body),
                effect_id,
                _utc_iso(now),
            ),
        )

    def preview(self, operation: Operation, payload: dict[str, Any]) -> dict[str, Any] | Refusal:
        """What `payload` would do now, computed from the provider's state; nothing changes."""
        with self.reading() as db:
            refusal = refusal_for(operation, payload)
            if refusal is not None:
                return refusal
            change = domain.compute(db, operation, payload)
        if change is None:
            return domain.stateless_preview(operation, payload)
        return change if isinstance(change, Refusal) else change.public()

    def lookup(self, key: str) -> tuple[list[Effect], Operation | None]:
        """Visible effects under `key`, and the operation the key was used for (None if unknown).

        A refused key yields ([], its operation): the provider knows the key, and no effect.
        """
        with self._lock:
            now = self._clock()
            key_row = self._db.execute(
                "SELECT operation FROM idempotency_keys WHERE key = ?", (key,)
            ).fetchone()
            rows = self._db.execute(
                "SELECT * FROM effects WHERE idempotency_key = ? AND visible_at <= ? ORDER BY seq",
                (key, now),
            ).fetchall()
        operation = None if key_row is None else Operation(key_row["operation"])
        return [_effect_from_row(r) for r in rows], operation

    def list_effects(self, operation: Operation | None = None) -> list[Effect]:
        """Every visible effect, oldest first; what a drift scan compares against."""
        with self._lock:
            now = self._clock()
            if operation is None:
                rows = self._db.execute(
                    "SELECT * FROM effects WHERE visible_at <= ? ORDER BY seq", (now,)
                ).fetchall()
            else:
                rows = self._db.execute(
                    "SELECT * FROM effects WHERE operation = ? AND visible_at <= ? ORDER BY seq",
                    (operation.value, now),
                ).fetchall()
        return [_effect_from_row(r) for r in rows]

    def effects_page(
        self,
        operation: Operation | None,
        created_gte: datetime | None,
        limit: int,
        starting_after: str | None,
        created_lt: datetime | None = None,
    ) -> tuple[list[Effect], bool]:
        """Up to `limit` visible effects created at or after `created_gte` (and before
        `created_lt`), newest first (Stripe's list order), older than the effect
        `starting_after`; and whether there are more. What the drift scan pages through."""
        where = ["visible_at <= ?"]
        args: list[Any] = []
        if operation is not None:
            where.append("operation = ?")
            args.append(operation.value)
        if created_gte is not None:
            # created_at is written by _utc_iso: the same format orders as text, and an
            # effect at `created_gte` itself is truncated alike, so it is listed.
            where.append("created_at >= ?")
            args.append(_utc_iso(created_gte.timestamp()))
        if created_lt is not None:
            # Rounded up to the millisecond created_at is written in: every effect created
            # before `created_lt` is listed (one in its very millisecond after it may be too).
            up = timedelta(microseconds=-created_lt.microsecond % 1000)
            where.append("created_at < ?")
            args.append(_utc_iso((created_lt + up).timestamp()))
        if starting_after is not None:
            where.append("seq < (SELECT seq FROM effects WHERE id = ?)")
            args.append(starting_after)
        with self._lock:
            rows = self._db.execute(
                f"SELECT * FROM effects WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
                (self._clock(), *args, limit + 1),
            ).fetchall()
        return [_effect_from_row(r) for r in rows[:limit]], len(rows) > limit


def _effect_from_row(row: sqlite3.Row) -> Effect:
    return Effect(
        id=row["id"],
        operation=Operation(row["operation"]),
        idempotency_key=row["idempotency_key"],
        payload=json.loads(row["payload"]),
        metadata=json.loads(row["metadata"]),
        status=row["status"],
        created_at=row["created_at"],
        visible_at=row["visible_at"],
    )
