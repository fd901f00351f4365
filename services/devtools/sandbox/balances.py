"""Seed 004's payments model: a charge has a refundable balance, refunds (partial ones
included) draw it down, and an operator can refund or revoke outside recon.

A refund whose payload names a `charge` this sandbox made (`"charge": "ch_..."`) is refused
(422, no effect, remembered under its key like any refusal) when the charge's
authorization was revoked or the amount exceeds what is left to refund. A refund that
names no known charge (a saga's undo, which carries the charge's own payload) is not
checked, as before. Read and decided inside the store's write transaction, so two refunds
cannot both spend the same balance.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from services.devtools.sandbox.catalog import Operation, Refusal

_SCHEMA = "CREATE TABLE IF NOT EXISTS revoked_charges (charge TEXT PRIMARY KEY, at TEXT NOT NULL)"


@dataclass(frozen=True)
class Balance:
    charge: str
    amount: int
    refunded: int
    revoked: bool

    @property
    def refundable(self) -> int:
        return max(0, self.amount - self.refunded)

    def to_json(self) -> dict[str, Any]:
        return {
            "charge": self.charge,
            "amount": self.amount,
            "refunded": self.refunded,
            "refundable": self.refundable,
            "revoked": self.revoked,
        }


def ensure_schema(db: sqlite3.Connection) -> None:
    db.execute(_SCHEMA)


def balance(db: sqlite3.Connection, charge: str) -> Balance | None:
    """The charge's balance as of now (effects not yet visible count: they happened)."""
    ensure_schema(db)
    row = db.execute(
        "SELECT payload FROM effects WHERE id = ? AND operation = ?",
        (charge, Operation.PAYMENTS_CHARGE.value),
    ).fetchone()
    if row is None:
        return None
    refunded = 0
    for (payload,) in db.execute(
        "SELECT payload FROM effects WHERE operation = ?", (Operation.PAYMENTS_REFUND.value,)
    ):
        refund = json.loads(payload)
        if refund.get("charge") == charge and isinstance(refund.get("amount"), int):
            refunded += refund["amount"]
    revoked = db.execute("SELECT 1 FROM revoked_charges WHERE charge = ?", (charge,)).fetchone()
    return Balance(charge, int(json.loads(row[0]).get("amount", 0)), refunded, revoked is not None)


def revoke(db: sqlite3.Connection, charge: str, at: str) -> None:
    ensure_schema(db)
    db.execute("INSERT OR IGNORE INTO revoked_charges (charge, at) VALUES (?, ?)", (charge, at))


def reinstate(db: sqlite3.Connection, charge: str) -> None:
    ensure_schema(db)
    db.execute("DELETE FROM revoked_charges WHERE charge = ?", (charge,))


def refund_refusal(
    db: sqlite3.Connection, operation: Operation, payload: dict[str, Any]
) -> Refusal | None:
    """The refusal a refund earns from its charge's balance, or None."""
    charge = payload.get("charge")
    if operation is not Operation.PAYMENTS_REFUND or not isinstance(charge, str):
        return None
    found = balance(db, charge)
    if found is None:
        return None
    if found.revoked:
        return Refusal(
            422,
            "authorization_revoked",
            f"The authorization of charge {charge!r} was revoked; nothing was refunded.",
        )
    amount = payload.get("amount")
    if not isinstance(amount, int) or amount > found.refundable:
        return Refusal(
            422,
            "amount_exceeds_refundable",
            f"Charge {charge!r} has {found.refundable} left to refund, not {amount!r};"
            " nothing was refunded.",
        )
    return None
