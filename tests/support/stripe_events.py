"""Stripe's webhook events in Stripe's own shapes, for the tests of the Stripe adapter's
reader (services.providers.stripe.webhooks).

The envelope and the objects follow Stripe's API reference (docs.stripe.com/api/events/
object) and the example objects stripe-mock v0.203.0 serves (embedded/openapi/
fixtures3.json), trimmed of fields recon does not read; the ids keep Stripe's formats.
"""

import json
from typing import Any

API_VERSION = "2024-06-20"


def payment_intent(
    status: str, op_key: str | None, intent_id: str = "pi_3PgafyB7WZ01zgkW1SjxsAJo"
) -> dict[str, Any]:
    """A payment intent as Stripe sends it, made under `op_key` (its metadata)."""
    received = 1250 if status == "succeeded" else 0
    return {
        "id": intent_id,
        "object": "payment_intent",
        "amount": 1250,
        "amount_capturable": 1250 if status == "requires_capture" else 0,
        "amount_received": received,
        "capture_method": "automatic",
        "client_secret": f"{intent_id}_secret_Dm43xiq1k0ywrRRjDoi8y1gkM",
        "confirmation_method": "automatic",
        "created": 1721948530,
        "currency": "eur",
        "last_payment_error": (
            {"type": "card_error", "code": "card_declined", "decline_code": "generic_decline"}
            if status == "requires_payment_method"
            else None
        ),
        "latest_charge": "ch_3PgafyB7WZ01zgkW1XYmPNZs" if received else None,
        "livemode": False,
        "metadata": {} if op_key is None else {"op_key": op_key},
        "payment_method": "pm_1PgaftB7WZ01zgkWm3waTcFp",
        "payment_method_types": ["card"],
        "status": status,
    }


def refund(
    status: str, op_key: str | None, refund_id: str = "re_3PgafyB7WZ01zgkW1qPvrRrP"
) -> dict[str, Any]:
    return {
        "id": refund_id,
        "object": "refund",
        "amount": 1250,
        "balance_transaction": None,
        "charge": "ch_3PgafyB7WZ01zgkW1XYmPNZs",
        "created": 1721948600,
        "currency": "eur",
        "destination_details": {"card": {"type": "reversal"}, "type": "card"},
        "metadata": {} if op_key is None else {"op_key": op_key},
        "payment_intent": "pi_3PgafyB7WZ01zgkW1SjxsAJo",
        "reason": None,
        "status": status,
    }


def charge_refunded(refunds: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A charge after a refund; `refunds` listed as Stripe does when they are expanded
    (None: not listed, as by default since API version 2022-11-15)."""
    charge: dict[str, Any] = {
        "id": "ch_3PgafyB7WZ01zgkW1XYmPNZs",
        "object": "charge",
        "amount": 1250,
        "amount_captured": 1250,
        "amount_refunded": 1250,
        "captured": True,
        "currency": "eur",
        "paid": True,
        "payment_intent": "pi_3PgafyB7WZ01zgkW1SjxsAJo",
        "refunded": True,
        "metadata": {},
    }
    if refunds is not None:
        charge["refunds"] = {
            "object": "list",
            "data": refunds,
            "has_more": False,
            "url": f"/v1/charges/{charge['id']}/refunds",
        }
    return charge


def event(
    kind: str,
    obj: dict[str, Any],
    idempotency_key: str | None,
    event_id: str = "evt_3PgafyB7WZ01zgkW1wyRHS12",
) -> dict[str, Any]:
    """The event envelope: `request` names the API request that caused it (both null for
    an event Stripe raised on its own)."""
    return {
        "id": event_id,
        "object": "event",
        "api_version": API_VERSION,
        "created": 1721948610,
        "data": {"object": obj, "previous_attributes": {}},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {
            "id": None if idempotency_key is None else "req_Dm43xiq1k0ywrR",
            "idempotency_key": idempotency_key,
        },
        "type": kind,
    }


def body(kind: str, obj: dict[str, Any], idempotency_key: str | None, **extra: Any) -> bytes:
    return json.dumps(event(kind, obj, idempotency_key, **extra)).encode()
