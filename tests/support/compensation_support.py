"""Helpers for the compensation tests (integration and fault)."""

from collections.abc import Callable
from datetime import datetime
from typing import Any

from events.keys import compensation_key
from support.recon_client import Recon, op, transaction


def failing_third_step(tx_id: str) -> dict[str, Any]:
    """reserve and charge succeed, a third step is declined: both must be undone."""
    body = transaction(tx_id)
    body["steps"].append(
        {
            "action": "deposit",
            "provider": "sandbox",
            "operation": "payments.charge",
            "payload": {"amount": 500, "currency": "usd", "customer": "cus_decline"},
            "compensation": {"operation": "payments.refund"},
        }
    )
    body["on_compensated"] = [
        {
            "action": "apology",
            "provider": "sandbox",
            "operation": "email.send",
            "payload": {"to": "a@example.com", "template": "order-cancelled"},
        }
    ]
    return body


def compensation_op_key(tx: dict[str, Any], action: str) -> str:
    return compensation_key(op(tx, action)["op_key"])


def time_of(events: list[dict[str, Any]], event_type: str) -> datetime:
    return datetime.fromisoformat(next(e["occurred_at"] for e in events if e["type"] == event_type))


async def wait_for(
    recon: Recon, tx_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 30
) -> dict[str, Any]:
    failure = f"{tx_id}: condition not met after {timeout}s"
    return await recon.wait_until(tx_id, check, timeout, failure)
