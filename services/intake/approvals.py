"""`POST /v1/approvals` and `POST /v1/approvals/{op_key}/reject` (docs/contract.md, "v1
additions"): a person approves, or refuses, a step waiting in `awaiting_approval`, and
approves again a step in `manual_review` whose next attempt (a review `retry`) needs a live
approval: the one its earlier attempt was dispatched on is spent.

Operator keys only (RECON_OPERATOR_KEYS): the key names the approver, the body never does,
and the approver must not be the transaction's requesting agent (separation of duties: an
operator key whose person is the transaction's `agent_id` is refused `403`).

An approval names `digest`, the digest of the latest preview of this transaction's
proposal (POST /v1/previews), so it is bound to the canonical proposal (the transaction's
fingerprint, which the preview's digest covers) and to what the approver was shown. Before
it is recorded the provider is asked again: if the resource moved on (`stale_revision`) the
step ends for good, and if the preview would now differ the approval is refused: preview
again and approve what is true now. The approval carries the resource's revision it was
shown, and the step's call is bound to it (transactions.revisions): a resource changed
after the approval is refused by the provider as `stale_revision`. Refusals are `409` with
`error`: `digest_mismatch` (another proposal, an older or a changed preview),
`approval_used` (the step already ran on an approval), `approval_expired` (`expires_in_s`
of 0 or less), `stale_revision`, `not_awaiting_approval`. The decider judges the approval
again on the transaction's own state (transactions.approvals), including its expiry at
the moment the step is reached, and records every approval and refusal as an event with
its digests.
"""

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from events.approval_events import OperationRejected
from events.approval_inputs import ApproveOperation, RejectOperation
from events.approval_policy import conflicts_of_duty
from events.canonical import fingerprint
from events.definition import TX_ID_PATTERN, OperationKind, OperationSpec
from services.config import Settings
from services.intake import auth
from services.intake.errors import ApiError, invalid_request, parsed, unknown_transaction
from services.intake.openapi import errors, json_body, ok
from services.intake.preview_store import latest_preview
from services.intake.previews import _step
from services.intake.produce import produce_command
from services.intake.projected import projected_state
from services.providers.adapters import SandboxAdapter
from services.providers.http import ProviderHttp
from transactions.approvals import APPROVABLE
from transactions.state import OperationState
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
        intent, step = await _step_of(conn, tenant, body.tx_id, body.action)
        preview = await latest_preview(conn, tenant, intent["fingerprint"])
    # On principals: the approver must be neither the agent the transaction names nor
    # the person whose operator key submitted it (as whichever agent).
    if conflicts_of_duty(approver, intent["agent_id"], intent["submitted_by"]):
        raise ApiError(
            403,
            "separation_of_duties",
            f"{approver!r} requested this transaction and may not approve it",
        )
    spec = _spec(intent, body.action)
    if spec.kind is not OperationKind.STEP or not spec.approval_required:
        # The decider's rule too (approval_not_required): only a gated step waits for one,
        # and only gated steps are in the preview the approval would be bound to.
        raise ApiError(
            409,
            "approval_not_required",
            f"{body.action!r} is not a step that waits for approval; nothing to approve",
        )
    if step.forward.status not in APPROVABLE:
        raise ApiError(409, "approval_used", f"step {body.action!r} already ran ({step.status})")
    if preview is None or preview["digest"] != body.digest:
        raise ApiError(
            409,
            "digest_mismatch",
            "the digest is not the latest preview of this transaction's proposal: the "
            "proposal changed, or it was previewed again; preview it and approve that",
        )
    if body.expires_in_s <= 0:
        raise ApiError(
            409,
            "approval_expired",
            f"an approval that expires in {body.expires_in_s}s has already lapsed; "
            "give expires_in_s of at least 1",
        )
    shown = next((s for s in _json(preview["body"])["steps"] if s["action"] == body.action), None)
    if shown is None:
        raise ApiError(
            409,
            "digest_mismatch",
            f"the preview does not show step {body.action!r}; preview it and approve that",
        )
    now = datetime.now(UTC)
    await _still_true(request, settings, tenant, body, spec, shown, approver, now)
    # One per request: an approval given again after an earlier one expired is a new
    # approval, not a repeat of the spent one (a retried request records a second live
    # approval of the same digest; the step's one dispatch spends both).
    approval_id = (
        "ap_" + fingerprint([tenant, body.tx_id, body.action, body.digest, now.isoformat()])[:32]
    )
    expires_at = now + timedelta(seconds=body.expires_in_s)
    command = ApproveOperation(
        message_id=approval_id,
        tenant=tenant,
        tx_id=body.tx_id,
        action=body.action,
        approval_id=approval_id,
        proposal_digest=intent["fingerprint"],
        preview_digest=body.digest,
        approver=approver,
        expires_at=expires_at,
        issued_at=now,
        # What the approver was shown, and `_still_true` found still true: the decider
        # binds the step's call to it when the step names no expected_revision.
        revision=_shown_revision(shown),
    )
    await produce_command(request.app.state, command, "the approval")
    return JSONResponse(
        {
            "approval_id": approval_id,
            "tx_id": body.tx_id,
            "action": body.action,
            "digest": body.digest,
            "proposal_digest": intent["fingerprint"],
            "approver": approver,
            "expires_at": expires_at.isoformat(),
        },
        status_code=201,
    )


def _shown_revision(shown: dict[str, Any]) -> int | None:
    revision = shown.get("current_revision")
    return revision if isinstance(revision, int) and not isinstance(revision, bool) else None


def stale_rejection_id(tenant: str, tx_id: str, action: str, approver: str, now: datetime) -> str:
    """One per request: the decider drops a repeated message_id, and a stale answer may
    come again (an earlier one reached a step not yet waiting, and was ignored)."""
    return "stale-" + fingerprint([tenant, tx_id, action, approver, now.isoformat()])[:32]


async def _still_true(
    request: Request,
    settings: Settings,
    tenant: str,
    body: ApprovalRequest,
    spec: OperationSpec,
    shown: dict[str, Any],
    approver: str,
    now: datetime,
) -> None:
    """Ask the provider again: approve only what is true now."""
    async with ProviderHttp(settings.provider_timeout_s) as http:
        adapter = SandboxAdapter(http, settings.providers[spec.provider])
        status, answer = await adapter.preview(spec.operation, spec.payload)
    try:
        fresh = _step(
            spec.action, spec.provider, spec.operation, status, answer, spec.approval_required
        )
    except ApiError as refused:
        if refused.code == "stale_revision":
            # Definitive: the step ends `failed`, reason stale_revision; the agent re-plans.
            stale = RejectOperation(
                message_id=stale_rejection_id(tenant, body.tx_id, body.action, approver, now),
                tenant=tenant,
                tx_id=body.tx_id,
                action=body.action,
                reason="stale_revision",
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
        row = await conn.fetchrow(
            "SELECT tx_id, action, state FROM operations WHERE tenant = $1 AND op_key = $2",
            who.tenant,
            op_key,
        )
        if row is None:
            # The id may also be an approval's (`ap_...`, POST /v1/approvals): the step it
            # approved is the one refused. Found once the decider recorded the approval.
            row = await conn.fetchrow(
                "SELECT o.tx_id, o.action, o.state FROM events e JOIN operations o"
                " ON o.tenant = e.tenant AND o.tx_id = e.tx_id AND o.action = e.data->>'action'"
                " WHERE e.tenant = $1 AND e.type IN ('OperationApproved', 'ApprovalRefused')"
                " AND e.data->>'approval_id' = $2 LIMIT 1",
                who.tenant,
                op_key,
            )
        if row is None:
            raise ApiError(404, "not_found", f"no operation {op_key!r} for this API key's tenant")
        command = RejectOperation(
            message_id=f"reject-{row['tx_id']}-{row['action']}",
            tenant=who.tenant,
            tx_id=row["tx_id"],
            action=row["action"],
            reason="rejected",
            actor=actor,
            note=body.note,
            issued_at=datetime.now(UTC),
        )
        state = await projected_state(conn, who.tenant, row["tx_id"])
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


async def _step_of(
    conn: asyncpg.Connection, tenant: str, tx_id: str, action: str
) -> tuple[asyncpg.Record, OperationState]:
    intent = await conn.fetchrow(
        "SELECT fingerprint, agent_id, operations, submitted_by FROM intents"
        " WHERE tenant = $1 AND tx_id = $2",
        tenant,
        tx_id,
    )
    if intent is None:
        raise unknown_transaction(tx_id)
    # The step's legs as the decider's own fold of the projected log has them.
    state = await projected_state(conn, tenant, tx_id)
    step = state.operation(action) if state is not None else None
    if step is None:
        # Not projected yet (or no such step): nothing to approve until it waits.
        raise ApiError(404, "not_found", f"no step {action!r} of {tx_id!r} (yet)")
    return intent, step


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _spec(intent: asyncpg.Record, action: str) -> OperationSpec:
    for raw in _json(intent["operations"]):
        spec = OperationSpec.model_validate(raw)
        if spec.action == action:
            return spec
    raise ApiError(404, "not_found", f"no step {action!r}")
