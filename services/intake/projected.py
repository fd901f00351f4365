"""A transaction as its projected log shows it, folded by the decider's own rules
(services.intake.tenant_store.TenantStore.projected_state, through
transactions.transaction.replay), so the intake judges a command the way the decider will,
instead of re-reading the rules it needs out of rows.

The projection may lag the log by a moment: a command the intake lets through on it is
judged again by the decider, on the log, and a refusal there is recorded.
"""

from collections.abc import Collection

import asyncpg

from events.inputs import DeciderInput
from events.transaction_events import CommandRefused
from services.intake.tenant_store import TenantStore
from transactions.state import TransactionState
from transactions.transaction import decide


async def projected_state(
    conn: asyncpg.Connection, tenant: str, tx_id: str
) -> TransactionState | None:
    """TenantStore.projected_state for services.intake.approvals, whose rewrite (in
    progress elsewhere) moves it onto the store; then this goes."""
    return await TenantStore(conn, tenant).projected_state(tx_id)


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
