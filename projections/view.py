"""What the `transactions`, `operations` and `reviews` tables hold, as a fold over one
transaction's events.

Pure: no I/O, no clock. Times come from the envelopes, so replaying the log rebuilds the
same rows, and an envelope at or below the view's last seq changes nothing, so a batch
that is applied twice (a retry after a database failure, a rebalance) is harmless.
"""

from datetime import datetime
from typing import Any, assert_never

from events.approval_events import (
    ApprovalExpired,
    ApprovalRefused,
    OperationApproved,
    OperationAwaitingApproval,
    OperationRejected,
)
from events.definition import Leg, OperationKind, OpStatus, Resolution, ReviewState, TxStatus
from events.envelope import Envelope
from events.legs import (
    LEG_EVENTS,
    LegEvent,
    LegState,
    evolve_legs,
    evolve_status,
    op_status,
)
from events.model import Message
from events.transaction_events import (
    CommandIgnored,
    CommandRefused,
    CompensationPlanned,
    Event,
    Evidence,
    EvidenceRecorded,
    ObservationIgnored,
    OperationCompensated,
    OperationConfirmed,
    OperationDispatched,
    OperationFailed,
    OperationNeedsReview,
    OperationUnknown,
    OwnershipReleased,
    ReviewResolved,
    TransactionAbortRequested,
    TransactionAccepted,
    TransactionClaimed,
    TransactionCommitted,
    TransactionCompensated,
    TransactionFailed,
    TransactionNeedsReview,
)
from transactions.input_bounds import counts_against_sessions
from transactions.ownership import Owner, evolve_owner


class ViewError(ValueError):
    """An envelope that cannot belong to the view it is applied to: a bug upstream (the
    decider is the only writer), never a condition to skip silently."""


class OpView(Message):
    action: str
    position: int
    kind: OperationKind
    provider: str
    operation: str
    op_key: str
    # The compensation's key (None when the operation has none): the webhook ingress finds
    # an operation by either key; the pull reconciler looks up either leg.
    compensation_key: str | None = None
    # The decider's own legs (events.legs), moved by its own rules: the compensation leg is
    # None until it is dispatched. How they are stored is projections.operation_row's.
    forward: LegState = LegState()
    compensation: LegState | None = None
    remote_id: str | None = None
    evidence: tuple[dict[str, Any], ...] = ()
    updated_at: datetime

    @property
    def state(self) -> OpStatus:
        """The operation's status in the API's vocabulary, derived from its legs."""
        return op_status(self.forward, self.compensation)

    @property
    def attempts(self) -> int:
        """The forward leg's attempt (the compensation's is its own leg's)."""
        return self.forward.attempt

    @property
    def open_review_id(self) -> str | None:
        return self.forward.review or (self.compensation.review if self.compensation else None)


class ReviewView(Message):
    """One entry of the manual-review queue: an operation leg at one attempt."""

    review_id: str
    action: str
    leg: Leg
    op_key: str  # the key of the leg under review
    attempt: int
    reason: str
    state: ReviewState = ReviewState.OPEN
    created_at: datetime
    resolved_at: datetime | None = None
    resolution: Resolution | None = None
    note: str | None = None
    actor: str | None = None


class TxView(Message):
    tenant: str
    tx_id: str
    status: TxStatus
    agent_id: str
    last_seq: int
    created_at: datetime
    updated_at: datetime
    operations: tuple[OpView, ...]
    reviews: tuple[ReviewView, ...] = ()
    # Who owns it and how many commands from agent sessions it took, moved by the
    # decider's own rules (transactions.ownership.evolve_owner, input_bounds'
    # SESSION_CAUSED): the intake judges a session's command on them instead of folding
    # the chain (services.intake.ownership). None: unknown, a row projected before they
    # were (migration 0014); they stay unknown until a rebuild from the log.
    owner: Owner | None = None
    session_events: int | None = 0


def apply(view: TxView | None, envelope: Envelope, event: Event | None = None) -> TxView:
    """`view` after `envelope`; `event`, when given, is the envelope's event already
    decoded (the projector decodes each record once, to tell poison from events)."""
    if view is not None and envelope.seq <= view.last_seq:
        return view
    if event is None:
        event = envelope.event()
    at = datetime.fromisoformat(envelope.occurred_at)
    if view is None:
        if not isinstance(event, TransactionAccepted):
            raise ViewError(
                f"{envelope.tenant}/{envelope.tx_id} seq {envelope.seq}: {envelope.type} "
                "arrived before TransactionAccepted"
            )
        return _accepted(envelope, event, at)
    if (view.tenant, view.tx_id) != (envelope.tenant, envelope.tx_id):
        raise ViewError(
            f"envelope of {envelope.tenant}/{envelope.tx_id} applied to {view.tenant}/{view.tx_id}"
        )
    # The status, seq and time in one copy with what _evolve moved (the fold's copies are
    # most of the projector's Python: the view was copied once for its operations or
    # reviews, then again here).
    moved = _evolve(view, event, envelope.seq, at)
    moved.update(status=_status(view.status, event), last_seq=envelope.seq, updated_at=at)
    if view.session_events is not None:
        owner = evolve_owner(view.owner, event)
        if owner is not view.owner:
            moved["owner"] = owner
        if counts_against_sessions(event):
            moved["session_events"] = view.session_events + 1
    return view.model_copy(update=moved)


def _accepted(envelope: Envelope, event: TransactionAccepted, at: datetime) -> TxView:
    return TxView(
        tenant=envelope.tenant,
        tx_id=envelope.tx_id,
        status=TxStatus.ACCEPTED,
        agent_id=event.agent_id,
        last_seq=envelope.seq,
        created_at=at,
        updated_at=at,
        owner=evolve_owner(None, event),
        operations=tuple(
            OpView(
                action=spec.action,
                position=position,
                kind=spec.kind,
                provider=spec.provider,
                operation=spec.operation,
                op_key=spec.op_key,
                compensation_key=spec.compensation_key,
                updated_at=at,
            )
            for position, spec in enumerate(event.operations)
        ),
    )


def _status(status: TxStatus, event: Event) -> TxStatus:
    """Statuses move by the decider's own rules."""
    if isinstance(event, TransactionAccepted):
        return status  # only seq 1 accepts (see _evolve)
    moved = evolve_status(status, event)
    assert moved is not None  # only TransactionAccepted starts from None
    return moved


def _evolve(view: TxView, event: Event, seq: int, at: datetime) -> dict[str, Any]:
    """The view's fields `event` moves (its operations, its reviews; none: empty), as an
    update for apply's one copy: what the decider does not keep (evidence, times and the
    review queue) and its legs, by its own rules. The status, seq and time are apply's.
    What the event changes of its operation is gathered first and the operation copied
    once (it was copied for its legs, then for its evidence)."""
    if isinstance(event, TransactionAccepted):
        # Only seq 1 accepts; a second one would be a decider bug, and the first
        # intent is the intent.
        return {}
    changes = _moved_legs(view, event) if isinstance(event, LEG_EVENTS) else {}
    match event:
        case OperationConfirmed():
            changes["remote_id"] = event.remote_id
            changes |= _evidence(view, event.action, event.evidence, event.type, seq)
            return _with_op(view, event.action, at, changes)
        case OperationUnknown() | OperationFailed() | OperationCompensated() | EvidenceRecorded():
            changes |= _evidence(view, event.action, event.evidence, event.type, seq)
            return _with_op(view, event.action, at, changes)
        case OperationNeedsReview():
            changes |= _evidence(
                view, event.action, event.evidence, event.type, seq, reason=event.reason
            )
            return _open_review(view, event, at) | _with_op(view, event.action, at, changes)
        case ObservationIgnored():
            changes |= _evidence(
                view, event.action, event.evidence, event.type, seq, reason=event.reason
            )
            return _with_op(view, event.action, at, changes)
        case ReviewResolved():
            return _resolve_review(view, event, at) | _with_op(view, event.action, at, changes)
        case (
            OperationAwaitingApproval()
            | OperationApproved()
            | ApprovalRefused()
            | ApprovalExpired()
            | OperationRejected()
        ):
            # The approval trail sits with the operation's evidence, digests included.
            entry = {
                "event": event.type,
                "seq": seq,
                "source": "approval",
                "observed_at": at.isoformat(),
                **event.model_dump(mode="json", exclude={"type", "schema_version", "action"}),
            }
            changes["evidence"] = (*_op(view, event.action).evidence, entry)
            return _with_op(view, event.action, at, changes)
        case OperationDispatched():
            return _with_op(view, event.action, at, changes)
        case (
            TransactionCommitted()
            | TransactionFailed()
            | TransactionCompensated()
            | TransactionNeedsReview()
            | CompensationPlanned()
            | TransactionAbortRequested()
            | CommandIgnored()
            | TransactionClaimed()
            | OwnershipReleased()
            | CommandRefused()
        ):
            return {}
        case _:
            assert_never(event)


def _moved_legs(view: TxView, event: LegEvent) -> dict[str, Any]:
    """The decider's leg rules, applied to the operation's own legs."""
    op = _op(view, event.action)
    forward, compensation = evolve_legs(op.forward, op.compensation, event)
    return {"forward": forward, "compensation": compensation}


def _with_op(view: TxView, action: str, at: datetime, changes: dict[str, Any]) -> dict[str, Any]:
    """The view's operations with `changes` made to its operation `action` (none: no
    update)."""
    return _set_op(view, action, at, **changes) if changes else {}


def _open_review(view: TxView, event: OperationNeedsReview, at: datetime) -> dict[str, Any]:
    """The view's reviews with the one `event` opens (already open: no update)."""
    if any(r.review_id == event.review_id for r in view.reviews):
        return {}  # one review per leg and attempt: the decider opens it once
    op = _op(view, event.action)
    key = op.op_key if event.leg is Leg.FORWARD else op.compensation_key
    if key is None:
        raise ViewError(
            f"{view.tenant}/{view.tx_id}: review of the compensation of {event.action!r}, "
            "which has no compensation key"
        )
    review = ReviewView(
        review_id=event.review_id,
        action=event.action,
        leg=event.leg,
        op_key=key,
        attempt=event.attempt,
        reason=event.reason,
        created_at=at,
    )
    return {"reviews": (*view.reviews, review)}


def _resolve_review(view: TxView, event: ReviewResolved, at: datetime) -> dict[str, Any]:
    reviews = tuple(
        r.model_copy(
            update={
                "state": ReviewState.RESOLVED,
                "resolved_at": at,
                "resolution": event.resolution,
                "note": event.note,
                "actor": event.actor,
            }
        )
        if r.review_id == event.review_id
        else r
        for r in view.reviews
    )
    return {"reviews": reviews}


def _op(view: TxView, action: str) -> OpView:
    for op in view.operations:
        if op.action == action:
            return op
    raise ViewError(f"{view.tenant}/{view.tx_id} has no operation {action!r}")


def _set_op(view: TxView, action: str, at: datetime, **changes: object) -> dict[str, Any]:
    _op(view, action)
    ops = tuple(
        op.model_copy(update={**changes, "updated_at": at}) if op.action == action else op
        for op in view.operations
    )
    return {"operations": ops}


def _evidence(
    view: TxView,
    action: str,
    evidence: Evidence | None,
    event_type: str,
    seq: int,
    reason: str | None = None,
) -> dict[str, Any]:
    """The operation's evidence trail with `evidence` added (nothing when there is none)."""
    if evidence is None:
        return {}
    entry: dict[str, Any] = {"event": event_type, "seq": seq, **evidence.model_dump(mode="json")}
    if reason is not None:
        entry["reason"] = reason
    return {"evidence": (*_op(view, action).evidence, entry)}
