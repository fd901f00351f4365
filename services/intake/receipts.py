"""`GET /v1/transactions/{tx_id}/receipt`: the tenant's own evidence bundle of one
transaction (docs/receipts.md, "Evidence bundles"), the file `audit bundle` writes, with
recon's verdict on it in the `Recon-Verdict` header. The body is the bundle as is, so the
tenant can hand it to an auditor who checks it with the public keys alone.

It reads the transaction's partitions of the topics (services.cli.audit_bundle): an
auditor's request, not a hot path. Another tenant's transaction is 404, as everywhere.
"""

from typing import Any

from aiokafka.errors import KafkaError
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from events.bundle import verify_bundle
from services.cli.audit_bundle import EvidenceUnavailable, build_bundle
from services.cli.log_snapshot import AuditError
from services.intake import auth
from services.intake.errors import ApiError, unknown_transaction
from services.intake.openapi import TxId, errors, ok
from services.intake.tenant_store import TenantStore
from services.signing_keys import verify_keys

router = APIRouter()


class Receipt(BaseModel):
    """An evidence bundle, format recon.bundle/1 (docs/receipts.md)."""

    format: str
    tenant: str
    tx_id: str
    events: list[dict[str, Any]]
    checkpoint: dict[str, Any] | None
    evidence: dict[str, list[dict[str, Any]]]


@router.get(
    "/v1/transactions/{tx_id}/receipt",
    responses={**ok(Receipt), **errors(401, 404, 422, 503)},
    response_model=None,
)
async def get_receipt(
    tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
) -> JSONResponse:
    state = request.app.state
    async with state.pool.acquire() as conn:
        if await TenantStore(conn, tenant).transaction(tx_id) is None:
            raise unknown_transaction(tx_id)
    try:
        bundle = await build_bundle(state.settings, tenant, tx_id)
    except EvidenceUnavailable as error:
        raise ApiError(503, "unavailable", str(error)) from error
    except AuditError as error:  # projected but not on this log (another topic prefix)
        raise unknown_transaction(tx_id) from error
    except KafkaError as error:
        raise ApiError(503, "unavailable", f"cannot read the log: {error}; retry later") from error
    verdict = verify_bundle(bundle, verify_keys(state.settings.environment))
    return JSONResponse(bundle, headers={"Recon-Verdict": verdict.verdict.value})
