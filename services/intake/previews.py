"""`POST /v1/previews`: what a proposal would do, computed by its providers from their own
state, without doing it (docs/contract.md, "v1 additions"; seed 003).

The body is a submission, exactly as it would be posted to `/v1/transactions`. Each step is
sent to its provider's preview (`POST <operation path>/preview`), which answers from its
state: the resource's `current_revision`, what changes (`from`/`to`), who else is affected,
the notifications that would go out, the reversibility. A preview that only restated the
proposal would be no evidence; this one is the provider's.

The preview is stored (Postgres, per tenant) with two sha256 digests: `proposal_digest`, of
the canonical proposal (the transaction's fingerprint, events.canonical), and `digest`, of
the canonical preview including the proposal's digest. An approval names `digest`, so it is
bound to both: to what will be executed and to what the approver was shown.
"""

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from events.canonical import fingerprint
from events.catalog import operation_info
from events.definition import OperationKind
from services.config import Settings
from services.intake import auth, policy
from services.intake.accept import plan
from services.intake.errors import ApiError, parsed
from services.intake.example import example_transaction
from services.intake.openapi import errors, json_body, ok
from services.intake.preview_store import store_preview
from services.intake.submission import SubmissionRequest
from services.providers.adapters import SandboxAdapter
from services.providers.http import ProviderHttp

router = APIRouter()


class StepPreview(BaseModel):
    action: str
    provider: str
    operation: str
    side_effect: str
    reversibility: str
    approval_required: bool
    resource: str | None
    current_revision: int | None
    effects: dict[str, Any]
    notifications: list[Any]
    # The provider's definitive refusal this step would meet (then no effects), or null.
    refusal: dict[str, Any] | None


class PreviewAnswer(BaseModel):
    preview_id: str
    tx_id: str
    proposal_digest: str
    digest: str
    steps: list[StepPreview]


@router.post(
    "/v1/previews",
    responses={**ok(PreviewAnswer), **errors(401, 403, 409, 413, 422, 503)},
    summary="Preview a proposal: its effect, computed by each provider, nothing applied",
    openapi_extra=json_body(SubmissionRequest, example=example_transaction()),
)
async def preview(request: Request, tenant: str = Depends(auth.tenant)) -> JSONResponse:
    settings: Settings = request.app.state.settings
    submission = parsed(await request.body(), SubmissionRequest)
    checked = await plan(request.app.state, tenant, submission)
    # The grant gate of the submission, before any provider is asked: a preview reads the
    # provider's state (a waitlist, a balance), which an agent denied the operation must
    # not read through it.
    policy.refuse_ungranted(checked.policy, submission)
    proposal_digest, specs = checked.fingerprint, checked.specs
    steps: list[dict[str, Any]] = []
    async with ProviderHttp(settings.provider_timeout_s) as http:
        for spec in specs:
            if spec.kind is not OperationKind.STEP:
                continue
            adapter = SandboxAdapter(http, settings.providers[spec.provider])
            status, body = await adapter.preview(spec.operation, spec.payload)
            steps.append(
                _step(
                    spec.action, spec.provider, spec.operation, status, body, spec.approval_required
                )
            )
    answer: dict[str, Any] = {
        "tx_id": submission.tx_id,
        "proposal_digest": proposal_digest,
        "steps": steps,
    }
    digest = fingerprint(answer)
    preview_id = "pv_" + digest[:32]
    answer = {"preview_id": preview_id, **answer, "digest": digest}
    async with request.app.state.pool.acquire() as conn:
        await store_preview(
            conn, tenant, preview_id, submission.tx_id, proposal_digest, digest, answer
        )
    return JSONResponse(answer)


def _step(
    action: str, provider: str, operation: str, status: int | None, body: Any, gated: bool
) -> dict[str, Any]:
    """One step's preview, or the refusal that ends the whole preview."""
    error = body.get("error") if isinstance(body, dict) else None
    if status == 409 and error == "stale_revision":
        raise ApiError(
            409,
            "stale_revision",
            f"step {action!r}: resource changed; re-plan required ({body.get('message', '')})",
        )
    if status is None or status >= 500 or status in (408, 429):
        # Not a server error of ours: the provider could not answer; the preview may be
        # asked again. A 409 keeps the intake's 5xx for its own failures.
        raise ApiError(
            409,
            "provider_unavailable",
            f"step {action!r}: the provider could not preview it ({status})",
        )
    info = operation_info(provider, operation)
    refusal = None
    if status != 200 or not isinstance(body, dict):
        # The provider would refuse this step for good (a decline, an unknown resource):
        # part of what the proposal would do, so it is shown, not an error of the preview.
        message = body.get("message") if isinstance(body, dict) else None
        refusal = {"status_code": status, "error": error, "message": message}
        body = {}
    effects = body.get("effects")
    notifications = body.get("notifications")
    revision = body.get("current_revision")
    resource = body.get("resource")
    return {
        "action": action,
        "provider": provider,
        "operation": operation,
        "side_effect": info.side_effect.value,
        # The catalog's word, unless the provider reports its own for this call.
        "reversibility": body.get("reversibility") or info.reversibility.value,
        "approval_required": gated,
        "resource": resource if isinstance(resource, str) else None,
        "current_revision": revision if isinstance(revision, int) else None,
        "effects": effects if isinstance(effects, dict) else {},
        "notifications": notifications if isinstance(notifications, list) else [],
        "refusal": refusal,
    }
