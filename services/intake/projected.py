"""A transaction as its projected log shows it, folded by the decider's own rules
(services.intake.tenant_store.TenantStore.projected_state, through
transactions.transaction.replay), so the intake judges a command the way the decider will,
instead of re-reading the rules it needs out of rows.

The projection may lag the log by a moment: a command the intake lets through on it is
judged again by the decider, on the log, and a refusal there is recorded.
"""

from collections.abc import Collection

from events.inputs import DeciderInput
from events.transaction_events import CommandRefused
from transactions.state import TransactionState
from transactions.transaction import decide


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
