"""Every call the sandbox answered, key by key: the provider-side evidence of "sent once".

The effects table cannot show a duplicate (a known key is replayed, never stored twice), so
a test that counts effects proves only that keys were stable. This log records each call as
it reached the provider: an apply (`applied`, `replayed`, `refused`, `key_reused`, or `failed`
when an injected fault stopped it before commit) or a lookup (`found`, `absent`,
`unavailable`), in arrival order, so a test can assert that an operation was applied once and
that any second call was preceded by a lookup.

Written after the call it describes, in its own small transaction: a sandbox crash between
the two loses the entry (tests never crash the sandbox).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from services.devtools.sandbox.store import Outcome, SandboxStore, _utc_iso

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    -- NULL for a lookup of a key the provider never saw
    operation TEXT,
    idempotency_key TEXT NOT NULL,
    outcome TEXT NOT NULL,
    at TEXT NOT NULL,
    -- the W3C trace context the caller sent, if any: which trace made this call
    traceparent TEXT,
    -- when the request arrived (`at` is when it was answered)
    received_at TEXT
);
CREATE INDEX IF NOT EXISTS calls_by_key ON calls (idempotency_key, seq);
"""

# When the request reached the provider (set by the handler as it starts), beside `at`, when
# it was answered: under load the two differ, and "no call started after T" needs the first.
RECEIVED_AT: ContextVar[float | None] = ContextVar("received_at", default=None)


class CallKind(StrEnum):
    APPLY = "apply"
    LOOKUP = "lookup"


class CallOutcome(StrEnum):
    APPLIED = "applied"  # a new effect was recorded
    REPLAYED = "replayed"  # the key was known: the original answer, nothing new done
    REFUSED = "refused"  # a new definitive refusal was recorded
    KEY_REUSED = "key_reused"  # the key was known with another payload: 409
    FAILED = "failed"  # an injected fault answered before anything was recorded
    FOUND = "found"  # a lookup that returned the effect
    ABSENT = "absent"  # a lookup that returned nothing
    UNAVAILABLE = "unavailable"  # a lookup answered 503 by an injected fault


APPLY_OUTCOMES = {
    Outcome.RECORDED: CallOutcome.APPLIED,
    Outcome.REPLAYED: CallOutcome.REPLAYED,
    Outcome.REFUSED: CallOutcome.REFUSED,
    Outcome.KEY_REUSED: CallOutcome.KEY_REUSED,
}


@dataclass(frozen=True)
class Call:
    seq: int
    kind: CallKind
    operation: str | None
    idempotency_key: str
    outcome: CallOutcome
    at: str
    traceparent: str | None = None
    received_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The public shape listed by `GET /v1/calls`."""
        return {
            "seq": self.seq,
            "kind": self.kind.value,
            "operation": self.operation,
            "idempotency_key": self.idempotency_key,
            "outcome": self.outcome.value,
            "at": self.at,
            "traceparent": self.traceparent,
            "received_at": self.received_at,
        }


class CallLog:
    def __init__(self, store: SandboxStore) -> None:
        self._store = store
        # Outside a transaction, as the store creates its own tables (executescript commits).
        with store.reading() as db:
            db.executescript(_SCHEMA)
            # A database made before these columns existed gains them.
            columns = {row[1] for row in db.execute("PRAGMA table_info(calls)").fetchall()}
            for column in ("traceparent", "received_at"):
                if column not in columns:
                    db.execute(f"ALTER TABLE calls ADD COLUMN {column} TEXT")

    def record(
        self,
        kind: CallKind,
        operation: str | None,
        key: str,
        outcome: CallOutcome,
        traceparent: str | None = None,
        received_at: float | None = None,
    ) -> None:
        received = None if received_at is None else _utc_iso(received_at)
        answered = _utc_iso(self._store.clock())
        with self._store.transaction() as db:
            db.execute(
                "INSERT INTO calls (kind, operation, idempotency_key, outcome, at, traceparent,"
                " received_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (kind.value, operation, key, outcome.value, answered, traceparent, received),
            )

    def find(self, key: str | None = None, operation: str | None = None) -> list[Call]:
        """Calls in arrival order, optionally of one key and/or one operation."""
        return self._select(key, operation, None, None)

    def page(
        self, key: str | None, operation: str | None, limit: int, after: int | None
    ) -> tuple[list[Call], bool]:
        """Up to `limit` calls in arrival order after the call numbered `after` (`seq`),
        optionally of one key and/or operation; and whether more follow."""
        listed = self._select(key, operation, limit + 1, after)
        return listed[:limit], len(listed) > limit

    def _select(
        self, key: str | None, operation: str | None, limit: int | None, after: int | None
    ) -> list[Call]:
        sql, args = "SELECT * FROM calls WHERE 1 = 1", list[str | int]()
        if key is not None:
            sql, args = sql + " AND idempotency_key = ?", [*args, key]
        if operation is not None:
            sql, args = sql + " AND operation = ?", [*args, operation]
        if after is not None:
            sql, args = sql + " AND seq > ?", [*args, after]
        sql += " ORDER BY seq"
        if limit is not None:
            sql, args = sql + " LIMIT ?", [*args, limit]
        with self._store.reading() as db:
            rows = db.execute(sql, args).fetchall()
        return [
            Call(
                seq=row["seq"],
                kind=CallKind(row["kind"]),
                operation=row["operation"],
                idempotency_key=row["idempotency_key"],
                outcome=CallOutcome(row["outcome"]),
                at=row["at"],
                traceparent=row["traceparent"],
                received_at=row["received_at"],
            )
            for row in rows
        ]
