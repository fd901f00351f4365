"""A transaction as its projected log shows it, folded by the decider's own rules
(transactions.transaction.replay), so the intake judges a command the way the decider will,
instead of re-reading the rules it needs out of rows.

The projection may lag the log by a moment: a command the intake lets through on it is
judged again by the decider, on the log, and a refusal there is recorded.
"""

import json
from collections.abc import Collection

import asyncpg

from events.inputs import DeciderInput
from events.transaction_events import CommandRefused, event_from
from transactions.state import TransactionState
from transactions.transaction import decide, replay


async def projected_state(
    conn: asyncpg.Connection, tenant: str, tx_id: str
) -> TransactionState | None:
    """None when no event of the transaction is projected yet. One read of the events'
    primary key; a live transaction's log is short (its session-caused events are capped,
    transactions.input_bounds)."""
    rows = await conn.fetch(
        "SELECT type, data FROM events WHERE tenant = $1 AND tx_id = $2 ORDER BY seq",
        tenant,
        tx_id,
    )
    if not rows:
        return None
    return replay(tenant, tx_id, (event_from(r["type"], json.loads(r["data"])) for r in rows))


def refusal(
    state: TransactionState | None, command: DeciderInput, reasons: Collection[str]
) -> CommandRefused | None:
    """The decider's refusal of `command` on `state`, when it is one of `reasons` (the ones
    the route answers itself; others are produced, to be recorded on the log)."""
    if state is None:
        return None  # not projected yet: the decider judges it
    for event in decide(state, command):
        if isinstance(event, CommandRefused) and event.reason in reasons:
            return event
    return None
