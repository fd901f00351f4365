"""What the MCP tools take and answer (their input and output schemas), from the SDK's own
models so the tools and the API cannot disagree (tests/unit/test_sdk_parity.py holds the
SDK's models to the API's)."""

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from recon_sdk.models import CatalogEntry, Operation, OperationKey, Review, Transaction
from recon_sdk.tx_ids import stable_tx_id

TX_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"


class McpTransaction(BaseModel):
    """A transaction as the model writes it: no agent or session (the server's), and a
    tx_id only if the model has one from an earlier answer to retry under."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tx_id: str | None = Field(
        default=None,
        pattern=TX_ID_PATTERN,
        description=(
            "leave it out: the server derives it from the transaction, so the same "
            "transaction resubmitted is recognised; name one only to retry a submission "
            "under the tx_id an earlier answer gave"
        ),
    )
    steps: tuple[Operation, ...] = Field(min_length=1)
    on_commit: tuple[Operation, ...] = ()
    on_compensated: tuple[Operation, ...] = ()

    def operations(self) -> tuple[Operation, ...]:
        return self.steps + self.on_commit + self.on_compensated

    def body(
        self, agent_id: str, session_id: str | None, task_id: str | None = None
    ) -> dict[str, Any]:
        """The submission body, its tx_id derived when the model named none: the same
        operations from the same agent session are the same intent, however often the model
        submits them (a different wording is caught by a step's natural_key)."""
        fields = self.model_dump(mode="json", exclude_defaults=True, exclude_none=True)
        fields.pop("tx_id", None)
        tx_id = self.tx_id or stable_tx_id(
            # The task too (when one is configured): another task is another authority,
            # so another intent, not a conflicting resubmission of this one.
            f"{agent_id}/{session_id or 'default'}" + (f"/{task_id}" if task_id else ""),
            json.dumps(fields, sort_keys=True, separators=(",", ":")),
            prefix="mcp",
        )
        body = {**fields, "tx_id": tx_id, "agent_id": agent_id}
        if session_id is not None:
            body["session_id"] = session_id
        if task_id is not None:
            body["task_id"] = task_id
        return body


class Submitted(BaseModel):
    """A submission's answer as the model sees it (the owner token stays with the server)."""

    tx_id: str
    status: str
    operations: list[OperationKey]


class Outcome(BaseModel):
    """Where a transaction stands after waiting."""

    transaction: Transaction
    settled: bool = Field(description="nothing more happens without a person, or it ended")
    needs_person: bool = Field(
        description="awaiting_approval or manual_review: tell the user; do not resubmit"
    )
    advice: str


class OperationList(BaseModel):
    operations: list[CatalogEntry]


class ReviewList(BaseModel):
    reviews: list[Review]


def advice(tx: Transaction, settled: bool) -> str:
    if tx.status == "awaiting_approval":
        return "a step waits for an operator's approval; tell the user, then wait again"
    if tx.status == "manual_review":
        return "a person must decide an outcome (see list_reviews); do not resubmit"
    if tx.terminal:
        return f"finished: {tx.status}"
    if settled:
        return tx.status
    return "still running: wait again with the same tx_id; never resubmit under a new one"
