"""What an agent asked for: the operations of a transaction and their states."""

from typing import Any

from pydantic import Field

from events.catalog import OperationFacts
from events.model import Message, absent, falsy
from events.str_enum import StrEnum

TX_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
ACTION_PATTERN = r"^[A-Za-z0-9._:-]{1,64}$"


class OperationKind(StrEnum):
    STEP = "step"  # runs in order; the transaction commits when every step is confirmed
    ON_COMMIT = "on_commit"  # a notification, dispatched only after TransactionCommitted
    ON_COMPENSATED = "on_compensated"  # dispatched only after TransactionCompensated


class Leg(StrEnum):
    """Which call of an operation an event is about: the operation itself, or its
    compensation (the call that undoes it)."""

    FORWARD = "forward"
    COMPENSATION = "compensation"


class ReviewState(StrEnum):
    """Where a manual review stands: open until a person resolves it."""

    OPEN = "open"
    RESOLVED = "resolved"


class Resolution(StrEnum):
    """What a person decided about an operation in manual review."""

    APPLIED = "applied"  # the effect happened
    NOT_APPLIED = "not_applied"  # it did not, and will not
    RETRY = "retry"  # look up, then send again under the same key


# A definitive refusal of a call made against a stale view of its resource (the call carried
# `expected_revision`, the resource is at another): a provider's 409 with this error code,
# and the reason the step then fails with.
STALE_REVISION = "stale_revision"


class TxStatus(StrEnum):
    ACCEPTED = "accepted"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"  # a step waits for a person's bound approval
    COMMITTED = "committed"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    FAILED = "failed"
    MANUAL_REVIEW = "manual_review"


# A transaction that ended: nothing of it will run again (manual_review is not finished:
# a person still decides).
FINISHED = (TxStatus.COMMITTED, TxStatus.FAILED, TxStatus.COMPENSATED)


class OpStatus(StrEnum):
    PENDING = "pending"
    AWAITING_APPROVAL = "awaiting_approval"
    DISPATCHED = "dispatched"
    UNKNOWN = "unknown"
    CONFIRMED = "confirmed"
    FAILED = "failed"
    MANUAL_REVIEW = "manual_review"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"


# An operation whose forward effect was confirmed: it is confirmed, or its compensation is
# under way or done (a compensation is dispatched only for a confirmed forward leg).
FORWARD_CONFIRMED = (OpStatus.CONFIRMED, OpStatus.COMPENSATING, OpStatus.COMPENSATED)


class Compensation(Message):
    operation: str
    payload: dict[str, Any] | None = None
    # The undo's class and reversibility as its provider declared them when the step was
    # accepted; left out when absent, so an event from before they were recorded hashes as
    # it did (it is read through events.legacy_facts).
    facts: OperationFacts | None = Field(default=None, exclude_if=absent)
    # How the undo's payload is built, as the step's provider declared it at submission
    # (events.catalog.OperationInfo.undo_payload); absent: the step's payload with
    # `reverses`, the shape every compensation recorded before it existed was sent with.
    template: dict[str, str] | None = Field(default=None, exclude_if=absent)


class OperationSpec(Message):
    action: str
    kind: OperationKind
    provider: str
    operation: str
    payload: dict[str, Any]
    op_key: str
    compensation: Compensation | None = None
    # The compensation's own key, derived from op_key (events.keys.compensation_key).
    compensation_key: str | None = None
    # Decided at intake from the operation's class (events.approval_policy): the step is
    # not dispatched until a person's approval bound to its proposal and preview arrives.
    # Left out when false (and the two after it when None), so a spec without a gate
    # serialises (and hashes, on the chain and in the decider's state) exactly as before
    # the gate existed. Per field, not by a wrap model_serializer: that put every spec's
    # serialisation through Python (a README transaction's state dumped in 128 us, 52 now)
    # and left the spec undescribed in the published schema.
    approval_required: bool = Field(default=False, exclude_if=falsy)
    # The business identity of the effect (events.intent_identity), when the agent named one.
    natural_key: str | None = Field(default=None, exclude_if=absent)
    # The transaction that held this step's natural key with another payload when this one
    # was submitted: why the step waits for a person (approval_required is then true).
    natural_key_held_by: str | None = Field(default=None, exclude_if=absent)
    # The operation's class and reversibility as its provider declared them at submission
    # (events.catalog.OperationFacts): the decider reads these, never the configuration of
    # the day. Left out when absent (events.legacy_facts reads those).
    facts: OperationFacts | None = Field(default=None, exclude_if=absent)
