"""The shapes of the intake's 2xx answers (docs/contract.md), for the OpenAPI document only.

The routes build their answers as dicts; these models are declared with `responses=` (never
`response_model=`, which would filter what a route returns), so a generated client gets
types and the fuzz test checks every answer against them. Fields may be added to an answer
(the contract allows it); the models do not forbid extra ones.
"""

from typing import Any, Literal

from pydantic import BaseModel, Field

from events.definition import Leg, OperationKind, OpStatus, Resolution, ReviewState, TxStatus
from events.drift import DriftKind


class OperationKey(BaseModel):
    action: str
    op_key: str


class OwnerSession(BaseModel):
    agent_id: str
    session_id: str
    owner_token: str = Field(
        description="proves this session owns the transaction: send it with the session's"
        " abort, release, review and renewing claim; returned only to the submitter"
        " and to a claimant"
    )


class SubmissionAccepted(BaseModel):
    tx_id: str
    status: Literal[TxStatus.ACCEPTED]
    operations: list[OperationKey]
    owner: OwnerSession


class IntentRefused(BaseModel):
    """A Kafka intent's refusal on recon.intent-replies.<tenant>: the HTTP API's status and
    error code for the same body; nothing was recorded."""

    tx_id: str
    status: Literal["refused"] = "refused"
    http_status: int
    error: str
    message: str
    # duplicate_intent: the transaction holding the natural key and its outcome.
    duplicate_of: dict[str, Any] | None = None


class OperationView(BaseModel):
    action: str
    kind: OperationKind
    op_key: str
    operation: str
    provider: str
    state: OpStatus
    attempts: int
    remote_id: str | None
    evidence: list[Any]
    reason: str | None = Field(
        None, description="why a `failed` step failed, e.g. `stale_revision` (re-plan)"
    )


class TransactionView(BaseModel):
    tx_id: str
    status: TxStatus
    agent_id: str
    operations: list[OperationView]
    compensation_plan: list[str]


class EventView(BaseModel):
    """One event with every field of its envelope, so the hash chain can be checked from
    the answer alone."""

    seq: int
    type: str
    occurred_at: str
    prev_hash: str
    hash: str
    data: dict[str, Any]
    event_id: str
    causation_id: str
    correlation_id: str
    tenant: str
    tx_id: str
    schema_version: int
    canon: str | None = Field(
        None,
        description="the canonical form the hash is computed in (`jcs`); absent on events "
        "sealed before forms were named (legacy-json)",
    )


NEXT_CURSOR = Field(
    description="send it back as `cursor` (with the same filters) for the next page; "
    "null on the last page"
)


class EventList(BaseModel):
    events: list[EventView]
    next_cursor: str | None = NEXT_CURSOR


class StepSummary(BaseModel):
    action: str
    provider: str
    operation: str
    state: OpStatus


class TransactionSummary(BaseModel):
    tx_id: str
    status: TxStatus
    agent_id: str
    created_at: str
    updated_at: str
    operations: list[StepSummary]


class TransactionList(BaseModel):
    transactions: list[TransactionSummary] = Field(description="newest first")
    next_cursor: str | None = NEXT_CURSOR


class AbortRequested(BaseModel):
    tx_id: str
    status: str


class ReviewSummary(BaseModel):
    id: str
    tx_id: str
    action: str
    op_key: str
    reason: str
    state: ReviewState
    created_at: str


class ReviewList(BaseModel):
    reviews: list[ReviewSummary] = Field(description="oldest first")
    next_cursor: str | None = NEXT_CURSOR


class ReviewView(ReviewSummary):
    leg: Leg
    attempt: int
    operation: str | None
    provider: str | None
    resolved_at: str | None
    resolution: Resolution | None
    note: str | None
    actor: str | None
    evidence: list[Any]


class ReviewResolving(BaseModel):
    id: str
    state: Literal["resolving"]  # the answer's, not a review's: the decider resolves it
    resolution: Resolution


class DriftView(BaseModel):
    id: str
    kind: DriftKind
    provider: str
    tx_id: str | None
    action: str | None
    op_key: str | None
    effect_id: str | None
    detail: dict[str, Any]
    detected_at: str


class DriftList(BaseModel):
    drift: list[DriftView] = Field(description="oldest first")
    next_cursor: str | None = NEXT_CURSOR


class WebhookAcknowledged(BaseModel):
    status: str
    type: str | None = None
