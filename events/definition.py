"""What an agent asked for: the operations of a transaction and their states."""

from enum import StrEnum
from typing import Any

from events.model import Message

TX_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
ACTION_PATTERN = r"^[A-Za-z0-9._:-]{1,64}$"


class OperationKind(StrEnum):
    STEP = "step"  # runs in order; the transaction commits when every step is confirmed
    ON_COMMIT = "on_commit"  # a notification, dispatched only after TransactionCommitted
    ON_COMPENSATED = "on_compensated"  # dispatched only after TransactionCompensated


class Leg(StrEnum):
    """Which call of an operation an event is about: the operation itself, or its undo."""

    FORWARD = "forward"
    COMPENSATION = "compensation"


class Resolution(StrEnum):
    """What a person decided about an operation in manual review."""

    APPLIED = "applied"  # the effect happened
    NOT_APPLIED = "not_applied"  # it did not, and will not
    RETRY = "retry"  # look up, then send again under the same key


class TxStatus(StrEnum):
    ACCEPTED = "accepted"
    RUNNING = "running"
    COMMITTED = "committed"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    FAILED = "failed"
    MANUAL_REVIEW = "manual_review"


class OpStatus(StrEnum):
    PENDING = "pending"
    DISPATCHED = "dispatched"
    UNKNOWN = "unknown"
    CONFIRMED = "confirmed"
    FAILED = "failed"
    MANUAL_REVIEW = "manual_review"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"


class Compensation(Message):
    operation: str
    payload: dict[str, Any] | None = None


class OperationSpec(Message):
    action: str
    kind: OperationKind
    provider: str
    operation: str
    payload: dict[str, Any]
    op_key: str
    compensation: Compensation | None = None
    # The undo's own key, derived from op_key (events.keys.compensation_key).
    compensation_key: str | None = None
