"""The shapes of the recon API (docs/contract.md), as typed models.

Requests are strict (`extra="forbid"`, as the API is): a typo is caught before anything is
sent. Answers allow extra fields, since the API may add fields within v1.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TxStatus = Literal[
    "accepted",
    "running",
    "committed",
    "compensating",
    "compensated",
    "failed",
    "manual_review",
    "awaiting_approval",
]
# Nothing more happens to a transaction in these states: it ended.
TERMINAL: frozenset[str] = frozenset({"committed", "failed", "compensated"})
# Nothing more happens until a person acts: an approval of a gated step, or a review.
NEEDS_PERSON: frozenset[str] = frozenset({"awaiting_approval", "manual_review"})
# What `wait()` returns on by default: the agent has nothing to poll for past these.
SETTLED: frozenset[str] = TERMINAL | NEEDS_PERSON

Resolution = Literal["applied", "not_applied", "retry"]


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Compensation(_Request):
    operation: str
    payload: dict[str, Any] | None = None


class Operation(_Request):
    """One step or notification of a transaction (build them with `recon_sdk.ops`)."""

    action: str = Field(pattern=r"^[A-Za-z0-9._:-]{1,64}$")
    provider: str = Field(min_length=1)
    operation: str
    payload: dict[str, Any]
    compensation: Compensation | None = None
    # The resource the step changes and the revision the agent planned against: the
    # provider refuses a stale plan (`stale_revision`).
    resource: str | None = Field(default=None, min_length=1, max_length=256)
    expected_revision: int | None = Field(default=None, ge=0, le=2**53)
    # The business identity of the effect (an order id): another tx_id naming it for the
    # same operation is refused `duplicate_intent` (README, "Intent identity").
    natural_key: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:@/#-]{1,256}$")


class TransactionRequest(_Request):
    """The body of `POST /v1/transactions`."""

    tx_id: str = Field(pattern=r"^[A-Za-z0-9._:-]{1,128}$")
    agent_id: str = Field(min_length=1, max_length=128)
    steps: tuple[Operation, ...] = Field(min_length=1)
    on_commit: tuple[Operation, ...] = ()
    on_compensated: tuple[Operation, ...] = ()
    # The agent session that owns the transaction; default `<agent_id>:default`.
    session_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:@/-]{1,128}$")
    # The task the transaction acts under: its grant in the tenant's policy document bounds
    # what may be asked (operations, amount per call, expiry), at submission and at each
    # call; None: the agent's own grants only.
    task_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:-]{1,128}$")

    def body(self) -> dict[str, Any]:
        # Empty notification lists are left out: the body is then byte-for-byte what a
        # hand-written client sends, and resubmitting it is recognised as the same intent.
        return self.model_dump(mode="json", exclude_defaults=True, exclude_none=True)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class OperationKey(_Answer):
    action: str
    op_key: str


class Owner(_Answer):
    """The session that owns a transaction and the token that proves it: an abort (or a
    release, a review request) from an agent key must carry all three."""

    agent_id: str
    session_id: str
    owner_token: str


class Accepted(_Answer):
    """The answer to a submission: the transaction's op keys, stable across retries, and
    the owning session with its token (keep it secret: it is what lets this session abort)."""

    tx_id: str
    status: str
    operations: list[OperationKey]
    owner: Owner | None = None  # None only from a recon older than owner tokens

    def op_key(self, action: str) -> str:
        return next(o.op_key for o in self.operations if o.action == action)


class OperationView(_Answer):
    action: str
    op_key: str
    operation: str
    state: str
    attempts: int = 0
    kind: str | None = None
    provider: str | None = None
    remote_id: str | None = None
    evidence: list[Any] = []
    # Why a failed operation failed (`stale_revision`, `rejected`, ...).
    reason: str | None = None


class Transaction(_Answer):
    tx_id: str
    status: str
    operations: list[OperationView]
    agent_id: str | None = None
    compensation_plan: list[str] = []

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def needs_person(self) -> bool:
        """A step waits for an operator's approval, or an outcome for a review: an agent
        cannot move it on by waiting longer (tell the user; the operator acts)."""
        return self.status in NEEDS_PERSON

    def operation(self, action: str) -> OperationView:
        return next(o for o in self.operations if o.action == action)


class Event(_Answer):
    """One event of the transaction's hash chain, in `seq` order from 1."""

    seq: int
    type: str
    occurred_at: str
    prev_hash: str
    hash: str
    data: dict[str, Any]


class StepSummary(_Answer):
    action: str
    provider: str
    operation: str
    state: str


class TransactionSummary(_Answer):
    """One row of `GET /v1/transactions`."""

    tx_id: str
    status: str
    agent_id: str
    created_at: str
    updated_at: str
    operations: list[StepSummary] = []


class TransactionPage(_Answer):
    """A page of `GET /v1/transactions`, newest first; pass `next_cursor` back as
    `cursor=` (with the same filters) for the next one, None on the last page."""

    transactions: list[TransactionSummary]
    next_cursor: str | None = None


class AbortRequested(_Answer):
    tx_id: str
    status: str


class Review(_Answer):
    id: str
    tx_id: str
    action: str
    op_key: str
    reason: str
    state: str
    created_at: str
    # Only on GET /v1/reviews/{id}.
    evidence: list[Any] | None = None


class ReviewResolving(_Answer):
    id: str
    state: str
    resolution: str


class Claimed(_Answer):
    """The answer to a claim: the session now owning the transaction and its token."""

    tx_id: str
    status: str
    agent_id: str
    session_id: str
    previous_session_id: str | None = None
    owner_token: str | None = None

    @property
    def owner(self) -> Owner | None:
        if self.owner_token is None:
            return None
        return Owner(
            agent_id=self.agent_id, session_id=self.session_id, owner_token=self.owner_token
        )


class CatalogEntry(_Answer):
    """One operation a provider offers, with what the policy and the retries rely on."""

    provider: str
    operation: str
    class_: str = Field(alias="class")
    reversibility: str
    compensation: str | None = None
    # The JSON Schema a step's payload must satisfy (422 `invalid_payload` otherwise).
    payload_schema: dict[str, Any] | None = None
    # The payload field quotas count as the amount.
    amount_field: str | None = None
    # How the undo's payload is built from the confirmed step; None: the step's payload
    # with `reverses`.
    undo_payload: dict[str, str] | None = None


class KillSwitch(_Answer):
    id: str
    scope: dict[str, Any]
    state: str
    held: int = 0
