"""The approvals a transaction holds, as its log gives and spends them: the decider's
state (and so the intake's check of a review `retry`, which asks the decider's own decide
on the projected log, services.intake.projected) folds them with these rules.

Pure: no I/O, no clock.
"""

from datetime import datetime

from events.approval_events import ApprovalExpired, OperationApproved
from events.definition import Leg
from events.model import Message
from events.transaction_events import Event, OperationDispatched


class Approval(Message):
    approval_id: str
    action: str
    proposal_digest: str
    preview_digest: str
    approver: str
    expires_at: datetime
    revision: int | None = None  # the resource's revision the approver was shown
    spent: bool = False  # dispatched on, or expired: never good again


def live(approvals: tuple[Approval, ...], action: str) -> Approval | None:
    """The latest of `approvals` of `action` not yet spent."""
    unspent = [a for a in approvals if a.action == action and not a.spent]
    return unspent[-1] if unspent else None


def evolve_approvals(approvals: tuple[Approval, ...], event: Event) -> tuple[Approval, ...]:
    match event:
        case OperationApproved():
            return (
                *approvals,
                Approval(
                    approval_id=event.approval_id,
                    action=event.action,
                    proposal_digest=event.proposal_digest,
                    preview_digest=event.preview_digest,
                    approver=event.approver,
                    expires_at=datetime.fromisoformat(event.expires_at),
                    revision=event.revision,
                ),
            )
        case OperationDispatched() if event.leg is Leg.FORWARD:
            return _spend(approvals, event.action)
        case ApprovalExpired():
            return _spend(approvals, event.action)
        case _:
            return approvals


def _spend(approvals: tuple[Approval, ...], action: str) -> tuple[Approval, ...]:
    return tuple(
        a.model_copy(update={"spent": True}) if a.action == action else a for a in approvals
    )
