"""An operation's legs, and the one set of rules that moves them and the transaction's
status: the decider's evolve and the projection's view both apply these, so the API
shows exactly what the decider decides on.

Pure: no I/O, no clock.
"""

from typing import Any, assert_never

from events.approval_events import (
    ApprovalExpired,
    ApprovalRefused,
    OperationApproved,
    OperationAwaitingApproval,
    OperationRejected,
)
from events.definition import Leg, OpStatus, TxStatus
from events.model import Message
from events.str_enum import StrEnum
from events.transaction_events import (
    CommandIgnored,
    CommandRefused,
    CompensationPlanned,
    Event,
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


class LegStatus(StrEnum):
    """Where one call of an operation stands. Its values are the API's names (OpStatus);
    `compensating` and `compensated` are not a leg's: they say where the compensation of a
    confirmed operation stands, and are derived (`op_status`)."""

    PENDING = "pending"
    AWAITING_APPROVAL = "awaiting_approval"  # not dispatched: a person must approve first
    DISPATCHED = "dispatched"
    UNKNOWN = "unknown"
    CONFIRMED = "confirmed"
    FAILED = "failed"
    MANUAL_REVIEW = "manual_review"


IN_FLIGHT = (LegStatus.DISPATCHED, LegStatus.UNKNOWN)

# What the operation shows while its compensation stands so (a compensation is dispatched
# only for a confirmed forward leg, so the compensation alone says where the operation is).
_COMPENSATION_SHOWS = {
    LegStatus.DISPATCHED: OpStatus.COMPENSATING,
    LegStatus.UNKNOWN: OpStatus.COMPENSATING,
    LegStatus.CONFIRMED: OpStatus.COMPENSATED,
    LegStatus.MANUAL_REVIEW: OpStatus.MANUAL_REVIEW,
}
# What the operation shows while it has no compensation: its forward leg's status, under
# the same name. Looked up, not built by OpStatus(value) at each call: the enum's call
# is Python (0.29 against 0.02 us), and the projector derives a status for every
# operation it moves and writes (~3 a README event).
_FORWARD_SHOWS = {status: OpStatus(status.value) for status in LegStatus}


class LegState(Message):
    status: LegStatus = LegStatus.PENDING
    attempt: int = 0
    review: str | None = None  # the open review of this leg, if any

    @property
    def in_flight(self) -> bool:
        return self.status in IN_FLIGHT


# The events that move an operation's legs; the others leave every leg as it is.
LegEvent = (
    OperationDispatched
    | OperationUnknown
    | OperationConfirmed
    | OperationFailed
    | OperationNeedsReview
    | OperationCompensated
    | ReviewResolved
    | OperationAwaitingApproval
    | OperationApproved
    | OperationRejected
)
LEG_EVENTS = (
    OperationDispatched,
    OperationUnknown,
    OperationConfirmed,
    OperationFailed,
    OperationNeedsReview,
    OperationCompensated,
    ReviewResolved,
    OperationAwaitingApproval,
    OperationApproved,
    OperationRejected,
)


def op_status(forward: LegState, compensation: LegState | None) -> OpStatus:
    """The operation's status in the API's vocabulary."""
    if compensation is not None:
        return _COMPENSATION_SHOWS[compensation.status]
    return _FORWARD_SHOWS[forward.status]


def evolve_legs(
    forward: LegState, compensation: LegState | None, event: LegEvent
) -> tuple[LegState, LegState | None]:
    match event:
        case OperationDispatched():
            changes: dict[str, object] = {"status": LegStatus.DISPATCHED, "attempt": event.attempt}
            which = event.leg
        case OperationUnknown():
            changes, which = {"status": LegStatus.UNKNOWN}, event.leg
        case OperationConfirmed():
            changes, which = {"status": LegStatus.CONFIRMED}, Leg.FORWARD
        case OperationFailed():
            changes, which = {"status": LegStatus.FAILED}, Leg.FORWARD
        case OperationNeedsReview():
            changes = {"status": LegStatus.MANUAL_REVIEW, "review": event.review_id}
            which = event.leg
        case OperationCompensated():
            changes, which = {"status": LegStatus.CONFIRMED}, Leg.COMPENSATION
        case ReviewResolved():
            changes, which = {"review": None}, event.leg
        case OperationAwaitingApproval():
            changes, which = {"status": LegStatus.AWAITING_APPROVAL}, Leg.FORWARD
        case OperationApproved():
            # An approval given ahead of the step leaves it pending; one it waited for
            # frees it (it is dispatched in the same decision).
            waiting = forward.status is LegStatus.AWAITING_APPROVAL
            changes, which = ({"status": LegStatus.PENDING} if waiting else {}), Leg.FORWARD
        case OperationRejected():
            changes, which = {"status": LegStatus.FAILED}, Leg.FORWARD
        case _:
            assert_never(event)
    if which is Leg.FORWARD:
        return forward.model_copy(update=changes), compensation
    # The compensation's first dispatch creates it.
    return forward, (compensation or LegState()).model_copy(update=changes)


def evolve_status(status: TxStatus | None, event: Event) -> TxStatus | None:
    """The transaction's status after `event`."""
    match event:
        case TransactionAccepted():
            return TxStatus.ACCEPTED
        case OperationDispatched() | OperationApproved():
            waiting = (TxStatus.ACCEPTED, TxStatus.AWAITING_APPROVAL)
            if isinstance(event, OperationApproved) and status is TxStatus.ACCEPTED:
                return status  # approved ahead of its step: nothing waited
            return TxStatus.RUNNING if status in waiting else status
        case OperationAwaitingApproval():
            return TxStatus.AWAITING_APPROVAL
        case TransactionCommitted():
            return TxStatus.COMMITTED
        case TransactionFailed():
            return TxStatus.COMPENSATING if event.compensable else TxStatus.FAILED
        case TransactionCompensated():
            return TxStatus.COMPENSATED
        case TransactionNeedsReview():
            return TxStatus.MANUAL_REVIEW
        case ReviewResolved():
            if status is not TxStatus.MANUAL_REVIEW:
                return status  # a notification's review: the transaction never waited
            # A step's forward leg can be in review only before the compensation starts,
            # and a compensation only once it is planned: the leg says which way to resume.
            return TxStatus.COMPENSATING if event.leg is Leg.COMPENSATION else TxStatus.RUNNING
        case (
            OperationUnknown()
            | OperationConfirmed()
            | OperationFailed()
            | OperationNeedsReview()
            | OperationCompensated()
            | EvidenceRecorded()
            | ObservationIgnored()
            | CommandIgnored()
            | CompensationPlanned()
            | TransactionAbortRequested()
            | TransactionClaimed()
            | OwnershipReleased()
            | CommandRefused()
            | ApprovalRefused()
            | ApprovalExpired()
            | OperationRejected()
        ):
            return status
        case _:
            assert_never(event)


def upcast_legs(data: Any) -> Any:
    """An operation's record (changelog states, finished markers) as the current code
    writes it, from any earlier version:

    - v1 kept the legs flat (status, attempt, comp_status, comp_attempt, open_review,
      review_leg) and overwrote the forward status with the compensation's progress
      (compensating, compensated, manual_review). A compensation is dispatched only for a
      confirmed forward leg, so a v1 record with one had a confirmed forward leg.
    - v2 held the legs as values but named the compensation leg `undo`; v3 gives it the
      API's name."""
    if not isinstance(data, dict) or "compensation" in data:
        return data
    if "undo" in data:
        data = dict(data)
        data["compensation"] = data.pop("undo")
        return data
    if "forward" in data or "status" not in data:
        return data
    data = dict(data)
    status, attempt = data.pop("status"), data.pop("attempt", 0)
    comp_status, comp_attempt = data.pop("comp_status", None), data.pop("comp_attempt", 0)
    review, review_leg = data.pop("open_review", None), data.pop("review_leg", None)
    forward: dict[str, Any] = {"status": status, "attempt": attempt}
    compensation: dict[str, Any] | None = None
    if comp_status is not None:
        forward["status"] = LegStatus.CONFIRMED
        compensation = {"status": comp_status, "attempt": comp_attempt}
    if review is not None:
        in_review = compensation if review_leg == Leg.COMPENSATION and compensation else forward
        in_review["review"] = review
    data["forward"], data["compensation"] = forward, compensation
    return data
