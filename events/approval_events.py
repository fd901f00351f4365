"""Events of the approval gate (docs/design.md, "Governance"): a step whose class needs a
person's approval waits for one; an approval is bound to the digests of the canonical
proposal and of the provider's preview, single-use and expiring; every approval, refusal
and rejection is a fact on the chain with the digests it was judged on."""

from typing import Literal

from pydantic import Field

from events.model import Message, absent
from events.preview import StepPreview


class OperationAwaitingApproval(Message):
    """The step will not be dispatched until an approval bound to this proposal arrives."""

    type: Literal["OperationAwaitingApproval"] = "OperationAwaitingApproval"
    schema_version: Literal[1] = 1
    action: str
    proposal_digest: str  # the transaction's fingerprint: sha256 of the canonical proposal
    side_effect: str
    reversibility: str


class OperationApproved(Message):
    """A person approved this step as previewed; the approval is spent by its dispatch."""

    type: Literal["OperationApproved"] = "OperationApproved"
    schema_version: Literal[1] = 1
    action: str
    approval_id: str
    proposal_digest: str
    preview_digest: str
    approver: str
    expires_at: str  # ISO 8601, judged against the time of the input that reaches the step
    # The resource's revision the approver was shown, if the preview showed one: the
    # approval holds for that state only (transactions.revisions). Left out when
    # absent, so an approval recorded before it existed reads and hashes as it was.
    revision: int | None = Field(default=None, exclude_if=absent)
    # Every step of the preview the approver was shown, which hashes to `preview_digest`
    # (events.preview): an auditor reads on the chain what the person approved, and can
    # recompute the digest. Absent from approvals recorded before it was carried.
    shown: tuple[StepPreview, ...] | None = Field(default=None, exclude_if=absent)


class ApprovalRefused(Message):
    """An approval that does not hold (a preview that does not hash to its digest or does
    not show the step gated, another proposal's, used, expired, the requester's own):
    recorded, and the step does not run on it. `reason` is one of
    transactions.approvals.ApprovalRefusal, or `transaction_<status>`."""

    type: Literal["ApprovalRefused"] = "ApprovalRefused"
    schema_version: Literal[1] = 1
    action: str
    approval_id: str
    reason: str
    proposal_digest: str
    preview_digest: str
    approver: str


class ApprovalExpired(Message):
    """The approval ran out before the step was reached: the step waits for a new one."""

    type: Literal["ApprovalExpired"] = "ApprovalExpired"
    schema_version: Literal[1] = 1
    action: str
    approval_id: str
    preview_digest: str


class OperationRejected(Message):
    """A person refused the step (or the provider's state made it stale before it ran): it
    never runs, and the transaction fails, compensating what ran."""

    type: Literal["OperationRejected"] = "OperationRejected"
    schema_version: Literal[1] = 1
    action: str
    reason: str  # "rejected" by a person, or "stale_revision"
    actor: str
    note: str = ""
    proposal_digest: str
