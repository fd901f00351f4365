"""Events: the immutable facts on recon.events, past tense, one `type` each.

An event here is the body; events.envelope adds seq, time and the hash chain.
"""

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from events.approval_events import (
    ApprovalExpired,
    ApprovalRefused,
    OperationApproved,
    OperationAwaitingApproval,
    OperationRejected,
)
from events.catalog import OperationFacts
from events.definition import Leg, OperationSpec, Resolution
from events.inputs import Evidence as Evidence
from events.model import Message, absent


class TransactionAccepted(Message):
    type: Literal["TransactionAccepted"] = "TransactionAccepted"
    schema_version: Literal[1] = 1
    agent_id: str
    fingerprint: str
    operations: tuple[OperationSpec, ...]
    # The owner (agent_id's session) and until when its lease holds; absent from events
    # written before sessions existed, and then left out of the JSON (the hash chain of
    # those events is unchanged).
    session_id: str | None = Field(default=None, exclude_if=absent)
    lease_expires_at: str | None = Field(default=None, exclude_if=absent)
    # Who submitted, as the key said (SubmitTransaction.submitted_by): the decider judges
    # separation of duties on it. Left out when absent, like the two fields above.
    submitted_by: str | None = Field(default=None, exclude_if=absent)


class TransactionClaimed(Message):
    """A session owns the transaction from now on (transactions.ownership): a
    successor whose claim was allowed (`lease_lapsed`, `handed_off`, `unowned`), or the
    owner renewing its lease (`renewed`). Any earlier session is fenced."""

    type: Literal["TransactionClaimed"] = "TransactionClaimed"
    schema_version: Literal[1] = 1
    agent_id: str
    session_id: str
    previous_agent_id: str | None
    previous_session_id: str | None
    lease_expires_at: str
    reason: str


class OwnershipReleased(Message):
    """The owner handed the transaction off: a successor may claim it at once."""

    type: Literal["OwnershipReleased"] = "OwnershipReleased"
    schema_version: Literal[1] = 1
    agent_id: str
    session_id: str


class CommandRefused(Message):
    """A command refused by a rule, kept for the trail: a fenced session's command, a
    claim while the lease holds, a change to an accepted operation. Nothing else
    happens."""

    type: Literal["CommandRefused"] = "CommandRefused"
    schema_version: Literal[1] = 1
    command: str
    reason: str
    rule: str
    agent_id: str | None = None
    session_id: str | None = None


class OperationDispatched(Message):
    """Asks the dispatcher to call the provider. `attempt` is the fencing token: only
    observations carrying it may move the operation."""

    type: Literal["OperationDispatched"] = "OperationDispatched"
    schema_version: Literal[1] = 1
    action: str
    leg: Leg = Leg.FORWARD
    op_key: str
    attempt: int
    # True when an earlier attempt may have reached the provider: look up before applying.
    lookup_first: bool
    # What to call, carried on the dispatch itself so that a dispatcher resuming from
    # its committed offset needs no earlier event to act.
    provider: str
    operation: str
    payload: dict[str, Any]
    # The agent the call is charged to when it is not the submitter: the successor that
    # claimed the transaction (issue 18, item 8). The gate judges grants, quotas and kill
    # switches on it; absent, on the submitting agent (the intents row).
    agent_id: str | None = Field(default=None, exclude_if=absent)
    # The `expected_revision` recon added to `payload` for a gated step that named none:
    # the revision its approval was given at (transactions.revisions). Every attempt
    # under the key carries the same one, so the key never comes with another payload.
    pinned_revision: int | None = Field(default=None, exclude_if=absent)
    # The called operation's class and reversibility, from the spec the intake recorded:
    # the dispatcher's redelivery rule reads them here (events.legacy_facts when absent).
    facts: OperationFacts | None = Field(default=None, exclude_if=absent)


class OperationUnknown(Message):
    type: Literal["OperationUnknown"] = "OperationUnknown"
    schema_version: Literal[1] = 1
    action: str
    leg: Leg = Leg.FORWARD
    attempt: int
    evidence: Evidence


class OperationConfirmed(Message):
    type: Literal["OperationConfirmed"] = "OperationConfirmed"
    schema_version: Literal[1] = 1
    action: str
    attempt: int
    remote_id: str | None
    evidence: Evidence


class OperationFailed(Message):
    type: Literal["OperationFailed"] = "OperationFailed"
    schema_version: Literal[1] = 1
    action: str
    attempt: int
    evidence: Evidence


class OperationNeedsReview(Message):
    """Machines cannot settle this operation: a person must (the manual-review queue)."""

    type: Literal["OperationNeedsReview"] = "OperationNeedsReview"
    schema_version: Literal[1] = 1
    action: str
    leg: Leg = Leg.FORWARD
    attempt: int
    reason: str
    review_id: str
    evidence: Evidence | None = None


class EvidenceRecorded(Message):
    """An observation that proves nothing new (a lookup that could not answer, a second
    'unknown'): kept for the trail, state unchanged."""

    type: Literal["EvidenceRecorded"] = "EvidenceRecorded"
    schema_version: Literal[1] = 1
    action: str
    leg: Leg = Leg.FORWARD
    attempt: int
    evidence: Evidence


class ObservationIgnored(Message):
    """An observation from a fenced (older) attempt or about a settled operation."""

    type: Literal["ObservationIgnored"] = "ObservationIgnored"
    schema_version: Literal[1] = 1
    action: str
    leg: Leg = Leg.FORWARD
    attempt: int
    current_attempt: int
    reason: str
    evidence: Evidence


class TransactionCommitted(Message):
    type: Literal["TransactionCommitted"] = "TransactionCommitted"
    schema_version: Literal[1] = 1


class OperationCompensated(Message):
    """The undo of a confirmed step is proven done. `remaining` is the rest of the plan,
    so the saga orchestrator knows the next compensation from this event alone."""

    type: Literal["OperationCompensated"] = "OperationCompensated"
    schema_version: Literal[1] = 1
    action: str
    attempt: int
    remote_id: str | None
    evidence: Evidence | None
    remaining: tuple[str, ...]


class TransactionFailed(Message):
    """No step will run any more. `compensable` lists the confirmed steps that have an
    undo, in the order they ran; when it is not empty the transaction is compensating."""

    type: Literal["TransactionFailed"] = "TransactionFailed"
    schema_version: Literal[1] = 1
    action: str
    reason: str
    compensable: tuple[str, ...] = ()


class CompensationPlanned(Message):
    type: Literal["CompensationPlanned"] = "CompensationPlanned"
    schema_version: Literal[1] = 1
    plan: tuple[str, ...]


class TransactionCompensated(Message):
    type: Literal["TransactionCompensated"] = "TransactionCompensated"
    schema_version: Literal[1] = 1


class TransactionAbortRequested(Message):
    """No further step is dispatched; in-flight ones settle, then confirmed ones are undone."""

    type: Literal["TransactionAbortRequested"] = "TransactionAbortRequested"
    schema_version: Literal[1] = 1
    actor: str
    reason: str


class ReviewResolved(Message):
    type: Literal["ReviewResolved"] = "ReviewResolved"
    schema_version: Literal[1] = 1
    review_id: str
    action: str
    leg: Leg
    resolution: Resolution
    note: str
    actor: str


class CommandIgnored(Message):
    """A command that arrived too late or out of place: kept for the trail, no effect."""

    type: Literal["CommandIgnored"] = "CommandIgnored"
    schema_version: Literal[1] = 1
    command: str
    reason: str


class TransactionNeedsReview(Message):
    type: Literal["TransactionNeedsReview"] = "TransactionNeedsReview"
    schema_version: Literal[1] = 1
    action: str
    reason: str


Event = Annotated[
    TransactionAccepted
    | OperationDispatched
    | OperationUnknown
    | OperationConfirmed
    | OperationFailed
    | OperationNeedsReview
    | EvidenceRecorded
    | ObservationIgnored
    | OperationCompensated
    | TransactionCommitted
    | TransactionFailed
    | CompensationPlanned
    | TransactionCompensated
    | TransactionAbortRequested
    | TransactionNeedsReview
    | ReviewResolved
    | CommandIgnored
    | TransactionClaimed
    | OwnershipReleased
    | CommandRefused
    | OperationAwaitingApproval
    | OperationApproved
    | ApprovalRefused
    | ApprovalExpired
    | OperationRejected,
    Field(discriminator="type"),
]
event_adapter: TypeAdapter[Event] = TypeAdapter(Event)


def event_from(type_: str, data: dict[str, Any]) -> Event:
    return event_adapter.validate_python({**data, "type": type_})


def event_data(event: Event) -> dict[str, Any]:
    """The envelope's `data`: the body without its discriminator."""
    return event.model_dump(mode="json", exclude={"type"})
