"""`GET /v1/drift` (CONTRACT.md, "Reviews and drift"): what the provider and recon's ledger
disagree about, as projected from recon.drift.

A drift about one of recon's operations carries its tenant and is shown to that tenant
only. An effect that matches no intent has no tenant: in v1 the deployment's tenants
share the provider accounts recon is configured with, so every tenant sees it.
"""

import json
from typing import Any

from fastapi import APIRouter, Depends, Request

from services.intake import auth
from services.intake.openapi import errors, ok
from services.intake.response_models import DriftList

router = APIRouter()


@router.get("/v1/drift", responses={**ok(DriftList), **errors(401, 503)}, response_model=None)
async def list_drift(request: Request, tenant: str = Depends(auth.tenant)) -> dict[str, Any]:
    async with request.app.state.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT drift_id, kind, provider, tx_id, action, op_key, effect_id, detail,"
            " detected_at FROM drift WHERE tenant = $1 OR tenant IS NULL"
            " ORDER BY detected_at, drift_id",
            tenant,
        )
    return {
        "drift": [
            {
                "id": row["drift_id"],
                "kind": row["kind"],
                "provider": row["provider"],
                "tx_id": row["tx_id"],
                "action": row["action"],
                "op_key": row["op_key"],
                "effect_id": row["effect_id"],
                "detail": json.loads(row["detail"]),
                "detected_at": row["detected_at"].isoformat(),
            }
            for row in rows
        ]
    }
