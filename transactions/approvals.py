"""The approval gate, the decider's side (docs/design.md, "Governance"; docs/contract.md, "v1
additions"): a step the intake marked `approval_required` is not dispatched until an
approval bound to this transaction's canonical proposal arrives from someone other than
the requesting agent, unexpired, and unused. Its dispatch spends it, and is bound to the
resource's revision the approval was given at (transactions.revisions). A step in review may
be approved again: a review `retry` of it needs a live approval (attempt_gate), so an
approval is evidence of one attempt, never standing authority for the next.

Pure: no I/O, no clock. "Now" is the time of the input being decided (its issued_at or
observed_at), so a replay decides exactly as the first run did.

The binding to the preview is judged here, not taken on the intake's word: the approval
carries every step its approver was shown, the digest is recomputed from them
(events.preview, the function the intake hashed the preview with), the preview must be of
this transaction's proposal and show the step gated, and the revision pinned on the step's
call is the one that step showed. A command produced to Kafka past the intake is judged
exactly like one from it.

The intake asks this same `approve` on the projected log before it answers (POST
/v1/approvals), and turns a refusal's reason into its API error; the decider judges again
on the log, where a command that slipped past a lagging projection is still refused, on
the chain, with its reason.
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
from events.preview import MAX_SHOWN_BYTES, StepPreview, preview_digest, shown_bytes
from events.str_enum import StrEnum
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


class ApprovalRefusal(StrEnum):
    """Why an approval does not hold (ApprovalRefused.reason); a transaction that takes
    none is refused `transaction_<status>` instead."""

    USED = "approval_used"  # this approval id was recorded, or the step ran on one
    STEP_ALREADY_RUN = "step_already_run"
    NOT_REQUIRED = "approval_not_required"
    SEPARATION_OF_DUTIES = "separation_of_duties"
    DIGEST_MISMATCH = "digest_mismatch"  # another proposal, or steps that hash otherwise
    PREVIEW_NOT_SHOWN = "preview_not_shown"  # a v1 command: no steps to check
    PREVIEW_TOO_LARGE = "preview_too_large"
    STEP_NOT_SHOWN = "step_not_shown"  # the preview lacks the step, or shows it ungated
    EXPIRED = "approval_expired"


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

    # The order is the answer's: a requester is told so whatever else is wrong.
    if any(a.approval_id == cmd.approval_id for a in state.approvals):
        return refused(ApprovalRefusal.USED)
    if conflicts_of_duty(cmd.approver, state.agent_id, state.submitted_by):
        return refused(ApprovalRefusal.SEPARATION_OF_DUTIES)
    if op is None or op.spec.kind is not OperationKind.STEP or not op.spec.approval_required:
        return refused(ApprovalRefusal.NOT_REQUIRED)
    # A step in review may be approved again: the approval its earlier attempt was
    # dispatched on is spent, and a review `retry` needs a live one (attempt_gate).
    again = op.forward.status is LegStatus.MANUAL_REVIEW
    if op.forward.status not in NOT_STARTED and not again:
        spent = _spent_on(state, cmd.action)
        return refused(ApprovalRefusal.USED if spent else ApprovalRefusal.STEP_ALREADY_RUN)
    if state.status not in (*OPEN, *((TxStatus.MANUAL_REVIEW,) if again else ())) or (
        state.aborting
    ):
        return refused(f"transaction_{'aborting' if state.aborting else state.status}")
    if cmd.proposal_digest != state.fingerprint:
        return refused(ApprovalRefusal.DIGEST_MISMATCH)
    shown = shown_step(cmd, op)
    if not isinstance(shown, StepPreview):
        return refused(shown)
    if cmd.expires_at <= cmd.issued_at:
        return refused(ApprovalRefusal.EXPIRED)
    return [
        OperationApproved(
            action=cmd.action,
            approval_id=cmd.approval_id,
            proposal_digest=cmd.proposal_digest,
            preview_digest=cmd.preview_digest,
            approver=cmd.approver,
            expires_at=cmd.expires_at.isoformat(),
            # What the approver was shown: the decider binds the step's call to it when the
            # step names no expected_revision (transactions.revisions).
            revision=shown.current_revision,
            shown=cmd.shown,
        )
    ]


def shown_step(cmd: ApproveOperation, op: OperationState) -> StepPreview | ApprovalRefusal:
    """The step as the approval's preview shows it, once the preview is proved to be the
    one its digest names; or why it is not. The intake re-checks this step against the
    provider before it produces the approval (services.intake.approvals)."""
    if cmd.shown is None:
        return ApprovalRefusal.PREVIEW_NOT_SHOWN
    # Bounded before it is hashed: the approval event carries it again.
    if shown_bytes(cmd.shown) > MAX_SHOWN_BYTES:
        return ApprovalRefusal.PREVIEW_TOO_LARGE
    if preview_digest(cmd.tx_id, cmd.proposal_digest, cmd.shown) != cmd.preview_digest:
        return ApprovalRefusal.DIGEST_MISMATCH
    spec = op.spec
    for step in cmd.shown:
        if step.action == spec.action:
            same = (step.provider, step.operation) == (spec.provider, spec.operation)
            return step if same and step.approval_required else ApprovalRefusal.STEP_NOT_SHOWN
    return ApprovalRefusal.STEP_NOT_SHOWN


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
