"""The shape of `GET /v1/operations/{op_key}` (services.intake.operation_record), for the
OpenAPI document only (see response_models)."""

from typing import Any

from pydantic import BaseModel, Field

from events.definition import Leg, OperationKind, OpStatus, TxStatus


class ApprovedOperation(BaseModel):
    kind: OperationKind
    provider: str
    operation: str
    payload: dict[str, Any]
    op_key: str
    compensation: dict[str, Any] | None
    compensation_key: str | None
    submitted_by: dict[str, Any]


class OperationRecord(BaseModel):
    op_key: str
    leg: Leg = Field(description="`compensation` when the key is the compensation's")
    tx_id: str
    action: str
    state: OpStatus = Field(description="the operation's state, as in GET /v1/transactions/{tx_id}")
    transaction_status: TxStatus
    remote_id: str | None
    approved: ApprovedOperation = Field(
        description="what was accepted; no later command can change it"
    )
    attempts: int
    dispatches: list[dict[str, Any]]
    observations: list[dict[str, Any]] = Field(description="every observation with evidence")
    approvals: list[dict[str, Any]] = Field(
        default=[], description="the step's approval trail: awaited, approved, refused, expired"
    )
    grant: dict[str, Any] | None = Field(
        default=None,
        description="`agent_id`, `operation`, `policy_version`, `granted` under today's policy",
    )
    owner: dict[str, Any] | None
    successions: list[dict[str, Any]]
    refusals: list[dict[str, Any]] = Field(description="fenced or refused commands")
