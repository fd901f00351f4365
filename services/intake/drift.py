"""`GET /v1/drift` (docs/contract.md, "Reviews and drift"): what the provider and recon's ledger
disagree about, as projected from recon.drift.

Who sees what:
- A drift about one of recon's operations carries its tenant and is shown to that tenant
  only (agent and operator keys alike).
- An effect that matches no intent has no tenant. Its payload may hold another tenant's
  customer, email or amount (an intent not yet known to the scan, a stray charge on the
  shared provider account), so every tenant's key, agent and operator alike, sees it
  redacted: kind, provider, effect id, operation and when it was found, nothing of the
  payload. Its full detail is for the deployment admin role only (RECON_ADMIN_KEYS, a key
  set apart from every tenant's), which sees that drift and no tenant's own.
"""

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from services.intake import auth
from services.intake.openapi import errors, ok
from services.intake.pagination import MAX_LIMIT, Cursor, Limit, instant, pager
from services.intake.response_models import DriftList
from services.intake.tenant_store import TenantStore, unowned_drift

router = APIRouter()


def redacted(detail: dict[str, Any]) -> dict[str, Any]:
    """What a tenant may see of a drift that belongs to no tenant: an allow-list, so a
    field added to the detail later stays hidden until someone decides otherwise."""
    # The scan puts the operation at the top of the detail; the webhook ingress inside the
    # provider's effect.
    effect = detail.get("effect")
    operation = detail.get("operation") or (
        effect.get("operation") if isinstance(effect, dict) else None
    )
    return {
        "operation": operation,
        "redacted": True,
        "message": "an effect that matches no intent of this deployment; its detail is "
        "shown to the deployment's admin keys only",
    }


@router.get("/v1/drift", responses={**ok(DriftList), **errors(401, 422, 503)}, response_model=None)
async def list_drift(
    request: Request,
    who: Annotated[auth.Principal | auth.Admin, Depends(auth.viewer)],
    limit: Limit = None,
    cursor: Cursor = None,
) -> dict[str, Any]:
    admin = isinstance(who, auth.Admin)
    tenant = None if isinstance(who, auth.Admin) else who.tenant
    page = pager(request, "drift", tenant, {}, limit, cursor, default=MAX_LIMIT)
    after = page.after()
    position = None if after is None else (instant(after[0]), str(after[1]))
    async with request.app.state.pool.acquire() as conn:
        # An admin belongs to no tenant: it sees the drift of none.
        if tenant is None:
            rows = await unowned_drift(conn, after=position, limit=page.limit + 1)
        else:
            rows = await TenantStore(conn, tenant).drift(after=position, limit=page.limit + 1)
    shown, next_cursor = page.page(rows, lambda r: [r["detected_at"].isoformat(), r["drift_id"]])
    drift = []
    for row in shown:
        detail = json.loads(row["detail"])
        if row["tenant"] is None and not admin:
            detail = redacted(detail)
        drift.append(
            {
                "id": row["drift_id"],
                "kind": row["kind"],
                "provider": row["provider"],
                "tx_id": row["tx_id"],
                "action": row["action"],
                "op_key": row["op_key"],
                "effect_id": row["effect_id"],
                "detail": detail,
                "detected_at": row["detected_at"].isoformat(),
            }
        )
    return {"drift": drift, "next_cursor": next_cursor}
