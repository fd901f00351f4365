"""Commands of the approval gate, from an operator through the intake (POST /v1/approvals,
POST /v1/approvals/{op_key}/reject). The intake checks what it can and answers at once;
the decider judges again against the transaction's own state, and its judgement is the one
on the chain."""

from datetime import datetime
from typing import Literal

from pydantic import Field

from events.model import Message


class ApproveOperation(Message):
    type: Literal["ApproveOperation"] = "ApproveOperation"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    action: str
    approval_id: str
    proposal_digest: str  # what the preview was computed for
    preview_digest: str  # what the approver saw
    approver: str  # the operator key's person, never a body field
    expires_at: datetime
    issued_at: datetime
    # The resource's revision the approver was shown (the preview's `current_revision`);
    # absent when the preview showed none, and in commands from before it existed. The
    # decider pins it on the step's call (transactions.revisions).
    revision: int | None = Field(default=None, exclude_if=lambda v: v is None)


class RejectOperation(Message):
    type: Literal["RejectOperation"] = "RejectOperation"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    action: str
    reason: str  # "rejected", or "stale_revision" when the provider's state moved on
    actor: str
    note: str = ""
    issued_at: datetime
