"""`POST /v1/previews`: what a proposal would do, computed by its providers from their own
state, without doing it (docs/contract.md, "v1 additions"; seed 003).

The body is a submission, exactly as it would be posted to `/v1/transactions`. Each step is
sent to its provider's preview (`POST <operation path>/preview`), which answers from its
state: the resource's `current_revision`, what changes (`from`/`to`), who else is affected,
the notifications that would go out, the reversibility. A preview that only restated the
proposal would be no evidence; this one is the provider's. How each answer is read is
services.intake.step_preview.

The preview is stored (Postgres, per tenant) with two sha256 digests: `proposal_digest`, of
the canonical proposal (the transaction's fingerprint, events.canonical), and `digest`, of
the canonical preview including the proposal's digest (events.preview.preview_digest). An
approval names `digest` and carries the steps it hashes, so the decider checks that it is
bound to both: to what will be executed and to what the approver was shown.
"""

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from events.definition import OperationKind
from events.preview import StepPreview, preview_digest, shown_json
from services.config import Settings
from services.intake import auth, natural_keys, submission_gate
from services.intake.accept import plan
from services.intake.errors import parsed
from services.intake.example import example_transaction
from services.intake.openapi import errors, json_body, ok
from services.intake.preview_store import store_preview
from services.intake.step_preview import step_preview
from services.intake.submission import SubmissionRequest
from services.intake.tenant_store import TenantStore
from services.providers.http import ProviderHttp
from services.providers.registry import adapter_for

router = APIRouter()


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
    submission_gate.refuse_ungranted(checked.policy, checked.catalog, submission)
    proposal_digest = checked.fingerprint
    async with request.app.state.pool.acquire() as conn:
        # A step whose natural key another transaction holds with another payload waits for
        # a person: previewed so, the operator's approval of this digest holds for it.
        specs = await natural_keys.as_judged(
            conn, tenant, submission.tx_id, checked.specs, settings.pending_horizon_s
        )
    steps: list[StepPreview] = []
    async with ProviderHttp(settings.provider_timeout_s) as http:
        for spec in specs:
            if spec.kind is not OperationKind.STEP:
                continue
            # The caller's tenant (its API key): the preview reads that tenant's account.
            # `plan` refused a provider not configured, so there is an adapter.
            adapter = adapter_for(http, settings, tenant, spec.provider)
            assert adapter is not None
            status, body = await adapter.preview(spec.operation, spec.payload)
            steps.append(step_preview(spec, status, body))
    # The one digest an approval is bound to, which the decider recomputes (events.preview).
    digest = preview_digest(submission.tx_id, proposal_digest, steps)
    preview_id = "pv_" + digest[:32]
    answer: dict[str, Any] = {
        "preview_id": preview_id,
        "tx_id": submission.tx_id,
        "proposal_digest": proposal_digest,
        "steps": shown_json(steps),
        "digest": digest,
    }
    async with request.app.state.pool.acquire() as conn:
        await store_preview(
            TenantStore(conn, tenant), preview_id, submission.tx_id, proposal_digest, digest, answer
        )
    return JSONResponse(answer)
