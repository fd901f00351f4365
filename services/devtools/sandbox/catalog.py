"""What the sandbox sells: its operations, their routes and id prefixes, and refusal rules.

Pure: no I/O, no clock, no randomness, so the rules can be read and tested alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Operation(StrEnum):
    PAYMENTS_CHARGE = "payments.charge"
    PAYMENTS_REFUND = "payments.refund"
    INVENTORY_RESERVE = "inventory.reserve"
    INVENTORY_RELEASE = "inventory.release"
    EMAIL_SEND = "email.send"
    # Stateful, with other people in the blast radius (seed 003): domain.py.
    WAITLIST_PROMOTE = "waitlist.promote"
    WAITLIST_RESTORE = "waitlist.restore"
    RECORDS_DELETE = "records.delete"

    @property
    def path(self) -> str:
        """The HTTP route, `/v1/payments/charge` for `payments.charge`."""
        return "/v1/" + self.value.replace(".", "/")

    @property
    def id_prefix(self) -> str:
        """Effect ids read like the provider's own (`ch_...`), so a stray id is recognisable."""
        return _ID_PREFIXES[self]


_ID_PREFIXES: dict[Operation, str] = {
    Operation.PAYMENTS_CHARGE: "ch",
    Operation.PAYMENTS_REFUND: "rf",
    Operation.INVENTORY_RESERVE: "rs",
    Operation.INVENTORY_RELEASE: "rl",
    Operation.EMAIL_SEND: "em",
    Operation.WAITLIST_PROMOTE: "wp",
    Operation.WAITLIST_RESTORE: "wr",
    Operation.RECORDS_DELETE: "rd",
}

# Magic values that make the sandbox refuse, in the spirit of Stripe's test cards. A refusal is
# definitive: no effect exists and none ever will under that key.
DECLINED_CUSTOMER = "cus_decline"
OUT_OF_STOCK_SKU = "sku-out-of-stock"


@dataclass(frozen=True)
class Refusal:
    status_code: int
    error: str
    message: str


def refusal_for(operation: Operation, payload: dict[str, Any]) -> Refusal | None:
    """The definitive refusal this request earns, or None when the effect may happen."""
    if operation is Operation.PAYMENTS_CHARGE and payload.get("customer") == DECLINED_CUSTOMER:
        return Refusal(
            status_code=402,
            error="card_declined",
            message=f"The card of customer {DECLINED_CUSTOMER!r} was declined; nothing was "
            "charged. Retrying under the same key returns the same refusal.",
        )
    if operation is Operation.INVENTORY_RESERVE and payload.get("sku") == OUT_OF_STOCK_SKU:
        return Refusal(
            status_code=422,
            error="out_of_stock",
            message=f"SKU {OUT_OF_STOCK_SKU!r} is out of stock; nothing was reserved. "
            "Retrying under the same key returns the same refusal.",
        )
    return None
