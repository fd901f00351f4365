"""What the decider consumes: commands (recon.commands) and observations
(recon.observations).

Commands are imperative; observations report what someone saw at a provider. Time
comes in on the message (`issued_at`, `observed_at`) so the decider never reads a clock.
"""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from events.approval_inputs import ApproveOperation, RejectOperation
from events.definition import Leg, OperationSpec, Resolution
from events.model import Message, absent
from events.str_enum import StrEnum


class SubmitTransaction(Message):
    type: Literal["SubmitTransaction"] = "SubmitTransaction"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    agent_id: str
    fingerprint: str
    operations: tuple[OperationSpec, ...]
    issued_at: datetime
    # The submitting agent's session, which owns the transaction for `lease_s` from
    # `issued_at` (transactions.ownership). Absent from commands written before
    # sessions existed (and then left out of the JSON, so those bytes do not change).
    session_id: str | None = Field(default=None, exclude_if=absent)
    lease_s: int | None = Field(default=None, exclude_if=absent)
    # The principal of the key that submitted (services.intake.auth.Principal.name), for
    # separation of duties (events.approval_policy.conflicts_of_duty); left out when absent.
    submitted_by: str | None = Field(default=None, exclude_if=absent)


class ClaimTransaction(Message):
    """From a successor agent, through the API: take over a transaction whose owner's
    lease lapsed or who handed it off. From the owner's own session: renew the lease."""

    type: Literal["ClaimTransaction"] = "ClaimTransaction"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    agent_id: str
    session_id: str
    lease_s: int
    issued_at: datetime


class ReleaseTransaction(Message):
    """From the owner, through the API: hand the transaction off now (its lease ends)."""

    type: Literal["ReleaseTransaction"] = "ReleaseTransaction"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    agent_id: str
    session_id: str
    issued_at: datetime


class AbortTransaction(Message):
    """From the agent or an operator, before commit: stop, settle, compensate."""

    type: Literal["AbortTransaction"] = "AbortTransaction"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    actor: str
    reason: str
    issued_at: datetime
    # The agent session that asks, when an agent asks (an operator's abort names none):
    # a session that no longer owns the transaction is fenced.
    agent_id: str | None = Field(default=None, exclude_if=absent)
    session_id: str | None = Field(default=None, exclude_if=absent)
    # The person, when an operator key asks: only a person may abort an owned transaction
    # without naming the owning session (issue 18, item 5).
    operator: str | None = Field(default=None, exclude_if=absent)


class PlanCompensation(Message):
    """From the saga orchestrator: undo these confirmed steps, in this order."""

    type: Literal["PlanCompensation"] = "PlanCompensation"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    plan: tuple[str, ...]
    issued_at: datetime


class CompensateOperation(Message):
    """From the saga orchestrator: dispatch the undo of one step, the next in the plan."""

    type: Literal["CompensateOperation"] = "CompensateOperation"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    action: str
    issued_at: datetime


class ResolveReview(Message):
    """From an operator, through the API."""

    type: Literal["ResolveReview"] = "ResolveReview"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    review_id: str
    resolution: Resolution
    note: str
    actor: str
    issued_at: datetime


class Outcome(StrEnum):
    """What an observer saw; classification of raw answers happens at the edge (the
    dispatcher's adapter), the decision of what it means happens in the decider."""

    SUCCEEDED = "succeeded"  # the provider holds the effect: a 2xx, or a lookup that found it
    REJECTED = "rejected"  # a definitive refusal: no effect and none will follow
    UNKNOWN = "unknown"  # timeout, reset, 5xx, pending: the effect may or may not exist
    ABSENT = "absent"  # a lookup proved there is no effect under the key
    UNAVAILABLE = "unavailable"  # a lookup could not answer
    KEY_CONFLICT = "key_conflict"  # the provider says the key was used for another payload


class Source(StrEnum):
    RESPONSE = "response"
    LOOKUP = "lookup"
    WEBHOOK = "webhook"
    REVIEW = "review"  # a person's resolution in the manual-review queue


class Evidence(Message):
    """What an observer saw, kept verbatim so a terminal state can be justified."""

    observation_id: str
    source: Source
    outcome: Outcome
    attempt: int
    status_code: int | None = None
    remote_id: str | None = None
    body: Any = None
    error: str | None = None
    observed_at: str


class RequestReview(Message):
    """From the pull reconciler (its lookup budget for an operation is spent), or from the
    agent session that owns the transaction, through the API (it wants a person to look)."""

    type: Literal["RequestReview"] = "RequestReview"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    action: str
    leg: Leg
    attempt: int
    reason: str
    issued_at: datetime
    # The asking session, when an agent asks: fenced like its other commands.
    agent_id: str | None = Field(default=None, exclude_if=absent)
    session_id: str | None = Field(default=None, exclude_if=absent)
    # What the asker saw, kept on the review: a dispatcher that stopped a new attempt
    # because a precondition no longer holds gives the provider's answer.
    evidence: Evidence | None = Field(default=None, exclude_if=absent)


class SignedDelivery(Message):
    """A webhook delivery as the provider sent it, kept on its observation as evidence: the
    signature covers these exact body bytes (and, in the Standard Webhooks scheme, the id
    and timestamp headers), so an auditor can have the provider, or anyone holding the
    account's secret, check the signature again long after recon verified it. Carried, not
    read by the decider; no secret is in it."""

    scheme: str  # reconcilers.signatures.Scheme: "standard" or "stripe"
    # The headers the scheme's signature is in, names lowercased, values as received.
    headers: dict[str, str]
    body_base64: str  # the raw body, byte for byte (base64, since it need not be text)


class OperationObserved(Message):
    type: Literal["OperationObserved"] = "OperationObserved"
    schema_version: Literal[1] = 1
    # Deterministic per observation (op_key, attempt, source, sequence at the observer)
    # so a re-sent observation is recognised as the same one.
    message_id: str
    tenant: str
    tx_id: str
    action: str
    op_key: str
    # The fencing token of the dispatch this observation belongs to. 0 for sightings not
    # tied to a dispatch (webhooks): they can prove an effect exists, nothing else. The
    # decider tells a webhook by its source, never by this number.
    attempt: int
    source: Source
    outcome: Outcome
    status_code: int | None = None
    remote_id: str | None = None
    body: Any = None
    error: str | None = None
    observed_at: datetime
    # Reported by the dispatcher that took the dispatch (its answer, or its own lookups on a
    # re-delivery or a retry), not by the pull reconciler: only the dispatcher's word says
    # the call of this attempt is over (its `unavailable` makes the leg `unknown`, so an
    # `absent` may then send again; a reconciler's does not). Absent in older records: False.
    by_dispatcher: bool = False
    # A webhook's delivery as received (its signature headers and raw body); absent from
    # every other source and from webhooks received before it was kept.
    delivery: SignedDelivery | None = Field(default=None, exclude_if=absent)


Command = (
    SubmitTransaction
    | ClaimTransaction
    | ReleaseTransaction
    | AbortTransaction
    | PlanCompensation
    | CompensateOperation
    | RequestReview
    | ResolveReview
    | ApproveOperation
    | RejectOperation
)
DeciderInput = Annotated[Command | OperationObserved, Field(discriminator="type")]
decider_input_adapter: TypeAdapter[DeciderInput] = TypeAdapter(DeciderInput)


def parse_input(raw: bytes) -> DeciderInput:
    return decider_input_adapter.validate_json(raw)
