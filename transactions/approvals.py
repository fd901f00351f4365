"""The approval gate, the decider's side (docs/design.md, "Governance"; docs/contract.md, "v1
additions"): a step the intake marked `approval_required` is not dispatched until an
approval bound to this transaction's canonical proposal arrives from someone other than
the requesting agent, unexpired, and unused. Its dispatch spends it, and is bound to the
resource's revision the approval was given at (transactions.revisions). A step in review may
be approved again: a review `retry` of it needs a live approval (attempt_gate), so an
approval is evidence of one attempt, never standing authority for the next.

Pure: no I/O, no clock. "Now" is the time of the input being decided (its issued_at or
observed_at), so a replay decides exactly as the first run did.

Judged here even though the intake checks first: the intake answers the operator at once,
the decider is the one writer of what happened, and a command that slipped past the
intake's read of a lagging projection is still refused, on the chain, with its reason.
"""

from __future__ import annotations

from datetime import datetime

from events.approval_events import (
    ApprovalExpired,
    ApprovalRefused,
    OperationApproved,
    OperationAwaitingApproval,
    OperationRejected,
)
from events.approval_inputs import ApproveOperation, RejectOperation
from events.approval_ledger import Approval, live
from events.approval_policy import conflicts_of_duty
from events.definition import Leg, OperationKind, TxStatus
from events.legs import LegStatus
from events.transaction_events import CommandIgnored, Event
from transactions.side_effects import leg_info
from transactions.state import OperationState, TransactionState

# Where a transaction may still take an approval or a rejection for a step.
OPEN = (TxStatus.ACCEPTED, TxStatus.RUNNING, TxStatus.AWAITING_APPROVAL)
NOT_STARTED = (LegStatus.PENDING, LegStatus.AWAITING_APPROVAL)
# Where a step may take an approval: not started, or in review (its next attempt needs one).
APPROVABLE = (*NOT_STARTED, LegStatus.MANUAL_REVIEW)


def current(state: TransactionState, action: str) -> Approval | None:
    """The latest approval of `action` not yet spent."""
    return live(state.approvals, action)


def approve(state: TransactionState, cmd: ApproveOperation) -> list[Event]:
    op = state.operation(cmd.action)

    def refused(reason: str) -> list[Event]:
        return [
            ApprovalRefused(
                action=cmd.action,
                approval_id=cmd.approval_id,
                reason=reason,
                proposal_digest=cmd.proposal_digest,
                preview_digest=cmd.preview_digest,
                approver=cmd.approver,
            )
        ]

    if any(a.approval_id == cmd.approval_id for a in state.approvals):
        return refused("approval_used")
    if op is None or op.spec.kind is not OperationKind.STEP or not op.spec.approval_required:
        return refused("approval_not_required")
    # A step in review may be approved again: the approval its earlier attempt was
    # dispatched on is spent, and a review `retry` needs a live one (attempt_gate).
    again = op.forward.status is LegStatus.MANUAL_REVIEW
    if op.forward.status not in NOT_STARTED and not again:
        return refused("approval_used" if _spent_on(state, cmd.action) else "step_already_run")
    if state.status not in (*OPEN, *((TxStatus.MANUAL_REVIEW,) if again else ())) or (
        state.aborting
    ):
        return refused(f"transaction_{'aborting' if state.aborting else state.status}")
    if cmd.proposal_digest != state.fingerprint:
        return refused("digest_mismatch")
    if conflicts_of_duty(cmd.approver, state.agent_id, state.submitted_by):
        return refused("separation_of_duties")
    if cmd.expires_at <= cmd.issued_at:
        return refused("approval_expired")
    return [
        OperationApproved(
            action=cmd.action,
            approval_id=cmd.approval_id,
            proposal_digest=cmd.proposal_digest,
            preview_digest=cmd.preview_digest,
            approver=cmd.approver,
            expires_at=cmd.expires_at.isoformat(),
            revision=cmd.revision,
        )
    ]


def _spent_on(state: TransactionState, action: str) -> bool:
    return any(a.action == action and a.spent for a in state.approvals)


def reject(state: TransactionState, cmd: RejectOperation) -> list[Event]:
    """The step never runs; the caller fails the transaction (compensating what ran).

    A gated step approved ahead (still `pending`, its approval live) may be refused too:
    that is how an unspent approval is revoked."""
    op = state.operation(cmd.action)
    if (
        op is None
        or op.spec.kind is not OperationKind.STEP
        or not op.spec.approval_required
        or op.forward.status not in NOT_STARTED
        or (op.forward.status is LegStatus.PENDING and current(state, cmd.action) is None)
        or state.status not in OPEN
    ):
        return [CommandIgnored(command=cmd.type, reason="step_not_awaiting_approval")]
    return [
        OperationRejected(
            action=cmd.action,
            reason=cmd.reason,
            actor=cmd.actor,
            note=cmd.note,
            proposal_digest=state.fingerprint,
        )
    ]


def gate(state: TransactionState, step: OperationState, now: datetime) -> list[Event] | None:
    """None: the pending `step` may be dispatched now. Otherwise what to record instead
    (nothing when it already waits)."""
    if not step.spec.approval_required:
        return None
    approval = current(state, step.spec.action)
    if approval is not None and now <= approval.expires_at:
        return None
    events: list[Event] = []
    if approval is not None:
        events.append(
            ApprovalExpired(
                action=step.spec.action,
                approval_id=approval.approval_id,
                preview_digest=approval.preview_digest,
            )
        )
    if step.forward.status is LegStatus.AWAITING_APPROVAL:
        return events
    info = leg_info(step.spec, Leg.FORWARD)
    return [
        *events,
        OperationAwaitingApproval(
            action=step.spec.action,
            proposal_digest=state.fingerprint,
            side_effect=info.side_effect.value,
            reversibility=info.reversibility.value,
        ),
    ]
