"""`POST /v1/approvals` and `POST /v1/approvals/{op_key}/reject` (docs/contract.md, "v1
additions"): a person approves, or refuses, a step waiting in `awaiting_approval`, and
approves again a step in `manual_review` whose next attempt (a review `retry`) needs a live
approval: the one its earlier attempt was dispatched on is spent.

Operator keys only (RECON_OPERATOR_KEYS): the key names the approver, the body never does,
and the approver must not be the transaction's requesting agent (separation of duties: an
operator key whose person is the transaction's `agent_id` is refused `403`).

An approval names `digest`, the digest of the latest preview of this transaction's
proposal (POST /v1/previews), and the command carries that preview's steps as shown: the
decider recomputes the digest from them (events.preview), checks that the preview is of
this transaction's proposal and shows the step gated, and pins the step's call to the
revision the step showed (transactions.revisions), so a resource changed after the
approval is refused by the provider as `stale_revision`. The route asks the decider's own
rule (transactions.approvals.approve, through `decide` on the projected log) before it
answers, and turns its refusal into the API's error (services.intake.approval_refusals):
`403 separation_of_duties`; `409` `digest_mismatch` (another proposal, an older or a
changed preview), `approval_used` (the step already ran), `approval_expired`
(`expires_in_s` of 0 or less), `approval_not_required`, `not_awaiting_approval`. What it
alone can do is I/O: before the approval is produced the provider is asked again, and if
the resource moved on (`stale_revision`) the step ends for good, and if the preview would
now differ the approval is refused: preview again and approve what is true now. The
decider judges the approval again on the log, including its expiry at the moment the step
is reached, and records every approval (with what was shown) and refusal as an event.
"""

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated

import asyncpg
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from events.approval_events import ApprovalRefused, OperationApproved, OperationRejected
from events.approval_inputs import ApproveOperation, RejectOperation
from events.definition import STALE_REVISION, TX_ID_PATTERN, OperationSpec
from events.keys import approval_id, rejection_id, stale_rejection_id
from events.preview import StepPreview
from services.config import Settings
from services.intake import auth
from services.intake.approval_refusals import refused as approval_refused
from services.intake.errors import ApiError, invalid_request, parsed, unknown_transaction
from services.intake.openapi import errors, json_body, ok
from services.intake.preview_store import latest_preview
from services.intake.produce import produce_command
from services.intake.step_preview import step_preview
from services.intake.tenant_store import TenantStore
from services.providers.http import ProviderHttp
from services.providers.registry import adapter_for
from transactions.approvals import shown_step
from transactions.transaction import decide

router = APIRouter()

MAX_EXPIRY_S = 7 * 86400


class ApprovalRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tx_id: Annotated[str, Field(pattern=TX_ID_PATTERN)]
    action: Annotated[str, Field(min_length=1, max_length=64)]
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    # 0 or less is an approval already lapsed: answered 409 `approval_expired` (the
    # decider's rule, expires_at <= issued_at), not a malformed request.
    expires_in_s: Annotated[int, Field(ge=-MAX_EXPIRY_S, le=MAX_EXPIRY_S)] = 900


class RejectionRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    note: Annotated[str, Field(max_length=1000)] = ""


class ApprovalRecorded(BaseModel):
    approval_id: str
    tx_id: str
    action: str
    digest: str
    proposal_digest: str
    approver: str
    expires_at: str


class RejectionRecorded(BaseModel):
    tx_id: str
    action: str
    status: str


def _operator(who: auth.Principal) -> str:
    if who.operator is None:
        raise ApiError(403, "operator_only", "approvals are given by a person: use an operator key")
    return who.operator


@router.post(
    "/v1/approvals",
    status_code=201,
    responses={**ok(ApprovalRecorded, 201), **errors(401, 403, 404, 409, 413, 422, 503)},
    openapi_extra=json_body(ApprovalRequest),
)
async def approve(
    request: Request, who: Annotated[auth.Principal, Depends(auth.principal)]
) -> JSONResponse:
    approver = _operator(who)
    body = parsed(await request.body(), ApprovalRequest)
    tenant, settings = who.tenant, request.app.state.settings
    async with request.app.state.pool.acquire() as conn:
        store = TenantStore(conn, tenant)
        # The whole fold, on purpose: the decider's rule reads the approval ledger (an id
        # used, a spent approval), the submitter and `aborting`, which no projected row
        # holds; a row copy of them would be a second judge (docs/benchmark.md, "An
        # operator's request and its transaction's chain").
        state = await store.projected_state(body.tx_id)
        if state is None:
            raise unknown_transaction(body.tx_id)
        preview = await latest_preview(store, state.fingerprint)
    step = state.operation(body.action)
    if step is None:
        raise ApiError(404, "not_found", f"no step {body.action!r} of {body.tx_id!r}")
    now = datetime.now(UTC)
    # The latest preview's steps, whatever digest the body names: the decider recomputes
    # the digest from them, so an older preview's digest (or none stored) is its
    # digest_mismatch, not a second rule here.
    shown = preview_steps(preview)
    approval = approval_id(tenant, body.tx_id, body.action, body.digest, now.isoformat())
    command = ApproveOperation(
        message_id=approval,
        tenant=tenant,
        tx_id=body.tx_id,
        action=body.action,
        approval_id=approval,
        proposal_digest=state.fingerprint,
        preview_digest=body.digest,
        approver=approver,
        expires_at=now + timedelta(seconds=body.expires_in_s),
        issued_at=now,
        shown=shown,
    )
    # The decider's own rule on the projected log (transactions.approvals): separation of
    # duties, a gated step not run yet, the binding to the preview, the expiry.
    judged = decide(state, command)
    if not judged or not isinstance(judged[0], OperationApproved):
        reason = judged[0].reason if judged and isinstance(judged[0], ApprovalRefused) else ""
        raise approval_refused(reason, body.action)
    approved, approved_step = judged[0], shown_step(command, step)
    assert isinstance(approved_step, StepPreview)  # the decider approved what it shows
    await _still_true(request, settings, tenant, body, step.spec, approved_step, approver, now)
    await produce_command(request.app.state, command, "the approval")
    return JSONResponse(
        {
            "approval_id": approval,
            "tx_id": body.tx_id,
            "action": body.action,
            "digest": body.digest,
            "proposal_digest": state.fingerprint,
            "approver": approver,
            "expires_at": approved.expires_at,
        },
        status_code=201,
    )


def preview_steps(preview: asyncpg.Record | None) -> tuple[StepPreview, ...]:
    if preview is None:
        return ()
    body = preview["body"]
    stored = json.loads(body) if isinstance(body, str) else body
    return tuple(StepPreview.model_validate(step) for step in stored["steps"])


async def _still_true(
    request: Request,
    settings: Settings,
    tenant: str,
    body: ApprovalRequest,
    spec: OperationSpec,
    shown: StepPreview,
    approver: str,
    now: datetime,
) -> None:
    """Ask the provider again: approve only what is true now."""
    async with ProviderHttp(settings.provider_timeout_s) as http:
        # The operator key's tenant, whose account the step's call will go to.
        # The submission was refused unless its provider was configured.
        adapter = adapter_for(http, settings, tenant, spec.provider)
        assert adapter is not None
        status, answer = await adapter.preview(spec.operation, spec.payload)
    try:
        fresh = step_preview(spec, status, answer)
    except ApiError as refused:
        if refused.code == STALE_REVISION:
            # Definitive: the step ends `failed`, reason stale_revision; the agent re-plans.
            stale = RejectOperation(
                message_id=stale_rejection_id(
                    tenant, body.tx_id, body.action, approver, now.isoformat()
                ),
                tenant=tenant,
                tx_id=body.tx_id,
                action=body.action,
                reason=STALE_REVISION,
                actor=approver,
                note=refused.message,
                issued_at=now,
            )
            await produce_command(request.app.state, stale, "the stale revision")
        raise
    if fresh != shown:
        raise ApiError(
            409,
            "digest_mismatch",
            f"step {body.action!r}: the provider's preview changed since the one approved; "
            "preview again and approve that",
        )


@router.post(
    "/v1/approvals/{op_key}/reject",
    status_code=202,
    responses={**ok(RejectionRecorded, 202), **errors(401, 403, 404, 409, 413, 422, 503)},
    openapi_extra=json_body(RejectionRequest, required=False),
)
async def reject(
    op_key: str, request: Request, who: Annotated[auth.Principal, Depends(auth.principal)]
) -> JSONResponse:
    """Refuse the step waiting under `op_key` (or the step an approval id approved): it
    never runs, and the transaction fails, compensating the steps that ran."""
    actor = _operator(who)
    raw = await request.body()
    try:
        body = RejectionRequest.model_validate_json(raw) if raw.strip() else RejectionRequest()
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from None
    async with request.app.state.pool.acquire() as conn:
        store = TenantStore(conn, who.tenant)
        row = await store.step(op_key)
        if row is None:
            raise ApiError(404, "not_found", f"no operation {op_key!r} for this API key's tenant")
        command = RejectOperation(
            message_id=rejection_id(row["tx_id"], row["action"]),
            tenant=who.tenant,
            tx_id=row["tx_id"],
            action=row["action"],
            reason="rejected",
            actor=actor,
            note=body.note,
            issued_at=datetime.now(UTC),
        )
        # The whole fold, as for an approval: whether a pending step's approval is live
        # is the approval ledger's, which no projected row holds.
        state = await store.projected_state(row["tx_id"])
    # The decider's own rule (transactions.approvals.reject), on the projected log: a gated
    # step not started yet may be refused whether it waits or was approved ahead (its live
    # approval is then revoked, since the step never runs); once dispatched, the approval
    # is spent and there is nothing to revoke.
    if state is None or not any(isinstance(e, OperationRejected) for e in decide(state, command)):
        raise ApiError(
            409,
            "not_awaiting_approval",
            f"operation {op_key!r} is {row['state']}: only a gated step not started yet "
            "(waiting, or approved ahead) can be refused",
        )
    await produce_command(request.app.state, command, "the rejection")
    return JSONResponse(
        {"tx_id": row["tx_id"], "action": row["action"], "status": "rejection_requested"},
        status_code=202,
    )
