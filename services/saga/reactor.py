"""The saga orchestrator's core: which commands an event calls for.

Pure: no I/O, no clock, no randomness. `issued_at` is the event's own time and every
message id is derived from the transaction and the step, so a command issued twice (a
redelivered event, a restart before the offset commit) is the same command, and the
decider's dedupe (message ids, and a plan or dispatch that already happened) ignores it.

Stateless on purpose: each event it reacts to carries everything the next command needs
(TransactionFailed the compensable steps, CompensationPlanned the plan,
OperationCompensated the rest of the plan). A restarted orchestrator therefore resumes
from its committed offset with nothing to restore, and the decider stays the only judge
of order: it refuses a compensation whose predecessors are not done yet.

Escalation to manual review is the decider's (a refused undo, a spent attempt budget),
not the orchestrator's: it only ever asks for the next undo.
"""

from datetime import datetime

from events.envelope import Envelope
from events.inputs import Command, CompensateOperation, PlanCompensation
from events.keys import compensate_id, plan_id
from events.transaction_events import (
    CompensationPlanned,
    OperationCompensated,
    TransactionFailed,
)


def react(envelope: Envelope) -> list[Command]:
    """The commands `envelope` calls for; most events call for none."""
    if envelope.type not in REACTS_TO:
        return []  # not parsed: the orchestrator reads every event of the log
    event = envelope.event()
    match event:
        case TransactionFailed(compensable=compensable) if compensable:
            # Undo in reverse order of the steps: the last confirmed effect goes first.
            return [_plan(envelope, tuple(reversed(compensable)))]
        case CompensationPlanned(plan=plan) if plan:
            return [_compensate(envelope, plan[0])]
        case OperationCompensated(remaining=remaining) if remaining:
            return [_compensate(envelope, remaining[0])]
        case _:
            return []


# The only events that call for a command. The runtime passes over the others by their
# type header (events.event_type_header) without parsing them.
REACTS_TO = frozenset({"TransactionFailed", "CompensationPlanned", "OperationCompensated"})


def _plan(envelope: Envelope, plan: tuple[str, ...]) -> PlanCompensation:
    return PlanCompensation(
        message_id=plan_id(envelope.tenant, envelope.tx_id),
        tenant=envelope.tenant,
        tx_id=envelope.tx_id,
        plan=plan,
        issued_at=_time_of(envelope),
    )


def _compensate(envelope: Envelope, action: str) -> CompensateOperation:
    return CompensateOperation(
        message_id=compensate_id(envelope.tenant, envelope.tx_id, action),
        tenant=envelope.tenant,
        tx_id=envelope.tx_id,
        action=action,
        issued_at=_time_of(envelope),
    )


def _time_of(envelope: Envelope) -> datetime:
    return datetime.fromisoformat(envelope.occurred_at)
