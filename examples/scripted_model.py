"""The scripted model both examples run: no network, no API key, the same tool calls every
time. It replays what a real model does under faults: it charges an order (the agent crashes
right after that submission and is restarted), then, having lost track, re-plans the same
charge under a new tool call (so a new tx_id, the same order id), then deletes a record
(a destructive step: a person must approve it), then answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ORDER = "order-42"
RECORD = "rec-7"
CHARGE = {"order_id": ORDER, "amount": 1299, "customer": "cus_1"}


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    args: dict[str, Any] = field(default_factory=dict)


SCRIPT: tuple[ToolCall | str, ...] = (
    ToolCall("call_charge", "charge_order", CHARGE),
    # The re-plan: same intent, new tool call id, so a new tx_id; the order id is the same.
    ToolCall("call_charge_again", "charge_order", CHARGE),
    ToolCall("call_delete", "delete_record", {"record": RECORD}),
    f"Charged {ORDER} once and deleted {RECORD}.",
)
# The tool call after whose submission the agent process dies (once).
CRASH_AFTER = "call_charge"
