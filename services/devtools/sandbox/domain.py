"""The sandbox's stateful operations, with other people in their blast radius (seed 003):

- `waitlist.promote` {"resource", "user", "expected_revision"?}: the user moves up one place
  on a class waitlist; the user ahead is displaced one place down and notified. Destructive,
  compensating only: `waitlist.restore` puts the positions back, but the displaced user was
  told (a second notification says so; the first stays sent).
- `waitlist.restore` {"reverses": {"op_key"}, ...}: the undo of one promotion, found by the
  promotion's idempotency key.
- `records.delete` {"resource", "expected_revision"?}: deletes a record. Irreversible.

Each resource has a revision, bumped by every change. A call carrying `expected_revision`
that is not the current one is refused for good (409 `stale_revision`, remembered under its
key like every refusal): the caller acted on a stale view and must re-plan.

`compute` works out what a call would change from the current state, without changing it:
the same answer serves the preview (`POST <operation path>/preview`) and the apply, so an
applied effect is exactly the effect that was previewed against that revision.

Runs inside the store's transaction (store.submit), so the state change, the effect and its
idempotency record commit together.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.devtools.sandbox.catalog import Operation, Refusal

SCHEMA = """
CREATE TABLE IF NOT EXISTS waitlists (
    resource TEXT PRIMARY KEY,
    revision INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS waitlist_positions (
    resource TEXT NOT NULL,
    user_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (resource, user_id)
);
-- A promotion's positions before it, so its undo can put them back.
CREATE TABLE IF NOT EXISTS waitlist_promotions (
    op_key TEXT PRIMARY KEY,
    resource TEXT NOT NULL,
    before TEXT NOT NULL,
    restored INTEGER NOT NULL DEFAULT 0
);
-- Every notification a change sent: what no undo can take back.
CREATE TABLE IF NOT EXISTS notifications (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    resource TEXT NOT NULL,
    user_id TEXT NOT NULL,
    message TEXT NOT NULL,
    effect_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    resource TEXT PRIMARY KEY,
    data TEXT NOT NULL,
    revision INTEGER NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0
);
"""

STATEFUL = frozenset(
    {Operation.WAITLIST_PROMOTE, Operation.WAITLIST_RESTORE, Operation.RECORDS_DELETE}
)

# (db, effect id, idempotency key) -> None: writes the change computed beforehand.
Writer = Callable[[sqlite3.Connection, str, str], None]


@dataclass(frozen=True)
class Change:
    """What a call would do, worked out from the provider's own state."""

    resource: str
    current_revision: int | None
    effects: dict[str, Any]
    notifications: list[dict[str, str]]
    reversibility: str
    write: Writer = field(repr=False, compare=False)

    def public(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "current_revision": self.current_revision,
            "effects": self.effects,
            "notifications": self.notifications,
            "reversibility": self.reversibility,
        }


def _refusal(code: int, error: str, message: str) -> Refusal:
    return Refusal(status_code=code, error=error, message=message)


def _stale(resource: str, expected: object, current: int) -> Refusal | None:
    if expected is None or expected == current:
        return None
    return _refusal(
        409,
        "stale_revision",
        f"resource changed; re-plan required: {resource!r} is at revision {current}, the "
        f"request expected {expected}. Retrying under the same key returns the same refusal.",
    )


def compute(
    db: sqlite3.Connection, operation: Operation, payload: dict[str, Any]
) -> Change | Refusal | None:
    """The change `payload` would make, a definitive refusal, or None for an operation
    that keeps no state here (charges, emails: recorded as effects only)."""
    if operation is Operation.WAITLIST_PROMOTE:
        return _promote(db, payload)
    if operation is Operation.WAITLIST_RESTORE:
        return _restore(db, payload)
    if operation is Operation.RECORDS_DELETE:
        return _delete(db, payload)
    return None


def _positions(db: sqlite3.Connection, resource: str) -> dict[str, int]:
    rows = db.execute(
        "SELECT user_id, position FROM waitlist_positions WHERE resource = ?", (resource,)
    ).fetchall()
    return {row["user_id"]: row["position"] for row in rows}


def _set_positions(
    db: sqlite3.Connection, resource: str, positions: dict[str, int], revision: int
) -> None:
    for user, position in positions.items():
        db.execute(
            "UPDATE waitlist_positions SET position = ? WHERE resource = ? AND user_id = ?",
            (position, resource, user),
        )
    db.execute("UPDATE waitlists SET revision = ? WHERE resource = ?", (revision, resource))


def _notify(
    db: sqlite3.Connection, resource: str, effect_id: str, sent: list[dict[str, str]]
) -> None:
    for note in sent:
        db.execute(
            "INSERT INTO notifications (resource, user_id, message, effect_id) VALUES (?, ?, ?, ?)",
            (resource, note["to"], note["message"], effect_id),
        )


def _promote(db: sqlite3.Connection, payload: dict[str, Any]) -> Change | Refusal:
    resource, user = str(payload.get("resource", "")), str(payload.get("user", ""))
    row = db.execute("SELECT revision FROM waitlists WHERE resource = ?", (resource,)).fetchone()
    if row is None:
        return _refusal(422, "unknown_waitlist", f"No waitlist {resource!r}; nothing was done.")
    revision: int = row["revision"]
    stale = _stale(resource, payload.get("expected_revision"), revision)
    if stale is not None:
        return stale
    positions = _positions(db, resource)
    if user not in positions:
        return _refusal(422, "not_on_waitlist", f"{user!r} is not on waitlist {resource!r}.")
    mine = positions[user]
    ahead = [u for u, p in positions.items() if p == mine - 1]
    if not ahead:
        return _refusal(422, "nothing_to_promote", f"{user!r} is first on {resource!r}.")
    [displaced] = ahead
    after = {user: mine - 1, displaced: mine}
    notes = [
        {
            "to": displaced,
            "message": f"You moved from position {mine - 1} to {mine} on {resource}.",
        }
    ]

    def write(db: sqlite3.Connection, effect_id: str, key: str) -> None:
        _set_positions(db, resource, after, revision + 1)
        db.execute(
            "INSERT INTO waitlist_promotions (op_key, resource, before) VALUES (?, ?, ?)",
            (key, resource, json.dumps({user: mine, displaced: mine - 1})),
        )
        _notify(db, resource, effect_id, notes)

    return Change(
        resource=resource,
        current_revision=revision,
        effects={
            "actor_position": {"from": mine, "to": mine - 1},
            "other_users_displaced": 1,
            "displaced": [{"user": displaced, "position": {"from": mine - 1, "to": mine}}],
            "notifications_sent": len(notes),
            "revision": {"from": revision, "to": revision + 1},
        },
        notifications=notes,
        reversibility="compensating_only",
        write=write,
    )


def _restore(db: sqlite3.Connection, payload: dict[str, Any]) -> Change | Refusal:
    reverses = payload.get("reverses")
    key = reverses.get("op_key") if isinstance(reverses, dict) else None
    row = db.execute(
        "SELECT resource, before, restored FROM waitlist_promotions WHERE op_key = ?", (key,)
    ).fetchone()
    if row is None:
        return _refusal(422, "unknown_promotion", f"No promotion under key {key!r} to restore.")
    resource: str = row["resource"]
    if row["restored"]:
        return _refusal(422, "already_restored", f"The promotion {key!r} was already restored.")
    revision: int = db.execute(
        "SELECT revision FROM waitlists WHERE resource = ?", (resource,)
    ).fetchone()["revision"]
    before: dict[str, int] = json.loads(row["before"])
    now = _positions(db, resource)
    notes = [
        {"to": u, "message": f"Your position on {resource} was restored to {p}."}
        for u, p in before.items()
        if now.get(u) != p
    ]

    def write(db: sqlite3.Connection, effect_id: str, _: str) -> None:
        _set_positions(db, resource, before, revision + 1)
        db.execute("UPDATE waitlist_promotions SET restored = 1 WHERE op_key = ?", (key,))
        _notify(db, resource, effect_id, notes)

    return Change(
        resource=resource,
        current_revision=revision,
        effects={
            "positions": {u: {"from": now.get(u), "to": p} for u, p in before.items()},
            "notifications_sent": len(notes),
            "revision": {"from": revision, "to": revision + 1},
        },
        notifications=notes,
        reversibility="compensating_only",
        write=write,
    )


def _delete(db: sqlite3.Connection, payload: dict[str, Any]) -> Change | Refusal:
    resource = str(payload.get("resource", ""))
    row = db.execute(
        "SELECT revision, deleted FROM records WHERE resource = ?", (resource,)
    ).fetchone()
    if row is None or row["deleted"]:
        return _refusal(422, "record_not_found", f"No record {resource!r}; nothing was deleted.")
    revision: int = row["revision"]
    stale = _stale(resource, payload.get("expected_revision"), revision)
    if stale is not None:
        return stale

    def write(db: sqlite3.Connection, _: str, __: str) -> None:
        db.execute(
            "UPDATE records SET deleted = 1, revision = ? WHERE resource = ?",
            (revision + 1, resource),
        )

    return Change(
        resource=resource,
        current_revision=revision,
        effects={"record": {"from": "present", "to": "deleted"}},
        notifications=[],
        reversibility="irreversible",
        write=write,
    )


def stateless_preview(operation: Operation, payload: dict[str, Any]) -> dict[str, Any]:
    """The preview of an operation that keeps no state here: what it would record."""
    return {
        "resource": None,
        "current_revision": None,
        "effects": {"records": {"operation": operation.value, "payload": payload}},
        "notifications": [],
        "reversibility": None,
    }


# --- seeding and reading, for tests and demos (domain_routes.py) ----------------------


def seed_waitlist(db: sqlite3.Connection, resource: str, users: list[str], revision: int) -> None:
    """Replace the waitlist `resource`: `users` in order, from position 1."""
    db.execute("DELETE FROM waitlist_positions WHERE resource = ?", (resource,))
    db.execute(
        "INSERT INTO waitlists (resource, revision) VALUES (?, ?)"
        " ON CONFLICT (resource) DO UPDATE SET revision = excluded.revision",
        (resource, revision),
    )
    for position, user in enumerate(users, start=1):
        db.execute(
            "INSERT INTO waitlist_positions (resource, user_id, position) VALUES (?, ?, ?)",
            (resource, user, position),
        )


def read_waitlist(db: sqlite3.Connection, resource: str) -> dict[str, Any] | None:
    row = db.execute("SELECT revision FROM waitlists WHERE resource = ?", (resource,)).fetchone()
    if row is None:
        return None
    positions = _positions(db, resource)
    notes = db.execute(
        "SELECT user_id, message, effect_id FROM notifications WHERE resource = ? ORDER BY seq",
        (resource,),
    ).fetchall()
    return {
        "resource": resource,
        "revision": row["revision"],
        "users": sorted(positions, key=positions.__getitem__),
        "notifications": [
            {"to": n["user_id"], "message": n["message"], "effect_id": n["effect_id"]}
            for n in notes
        ],
    }


def seed_record(db: sqlite3.Connection, resource: str, data: Any, revision: int) -> None:
    db.execute(
        "INSERT INTO records (resource, data, revision) VALUES (?, ?, ?) ON CONFLICT (resource)"
        " DO UPDATE SET data = excluded.data, revision = excluded.revision, deleted = 0",
        (resource, json.dumps(data), revision),
    )


def read_record(db: sqlite3.Connection, resource: str) -> dict[str, Any] | None:
    row = db.execute("SELECT * FROM records WHERE resource = ?", (resource,)).fetchone()
    if row is None:
        return None
    return {
        "resource": resource,
        "revision": row["revision"],
        "deleted": bool(row["deleted"]),
        "data": json.loads(row["data"]),
    }
