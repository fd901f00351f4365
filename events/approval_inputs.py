"""Commands of the approval gate, from an operator through the intake (POST /v1/approvals,
POST /v1/approvals/{op_key}/reject). The intake checks what it can and answers at once;
the decider judges again against the transaction's own state, and its judgement is the one
on the chain."""

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from events.model import Message, absent
from events.preview import StepPreview


class ApproveOperation(Message):
    """v2: the approval carries the preview its approver was shown, so the decider checks
    the binding itself (transactions.approvals): the steps hash to `preview_digest`, the
    preview is of this transaction's proposal and shows the step gated, and the revision
    pinned on the step's call is the one shown."""

    type: Literal["ApproveOperation"] = "ApproveOperation"
    schema_version: Literal[1, 2] = 2
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
    # Every step of the preview, as shown (events.preview). None only in a v1 command,
    # which carried the digest and the revision alone: nothing on it proves what was shown,
    # so the decider refuses it (`preview_not_shown`) and the operator approves again.
    shown: tuple[StepPreview, ...] | None = Field(default=None, exclude_if=absent)

    @model_validator(mode="before")
    @classmethod
    def _upcast_v1(cls, data: Any) -> Any:
        """v1 -> v2: its `revision` was the intake's word for what was shown; v2 takes it
        from the shown step instead, so it is dropped, and the command stays readable."""
        if isinstance(data, dict) and data.get("schema_version", 1) == 1 and "revision" in data:
            return {k: v for k, v in data.items() if k != "revision"}
        return data


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
