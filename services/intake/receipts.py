"""`GET /v1/transactions/{tx_id}/receipt`: the tenant's own evidence bundle of one
transaction (docs/receipts.md, "Evidence bundles"), the file `audit bundle` writes, with
recon's verdict on it in the `Recon-Verdict` header. The body is the bundle as is, so the
tenant can hand it to an auditor who checks it with the public keys alone.

Any tenant may ask it, as often as it likes, and it is built on the event loop every other
request shares: it reads only the transaction's window of its partitions, placed by the
projection (services.cli.transaction_window), so one costs what the transaction's records
and their neighbours in time cost, however long the log has lived; and at most
RECON_RECEIPT_CONCURRENCY are built at once, past which it is 503 with Retry-After.
Another tenant's transaction is 404, as everywhere.
"""

from typing import Any

from aiokafka.errors import KafkaError
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from events.bundle import verify_bundle
from services.cli.audit_bundle import bound_digests, bundle_from_log, bundle_topics, stored_previews
from services.cli.log_snapshot import AuditError
from services.cli.partition_reader import open_reader
from services.cli.transaction_window import known_of
from services.intake import auth
from services.intake.errors import ApiError, unknown_transaction
from services.intake.openapi import TxId, errors, ok
from services.intake.tenant_store import TenantStore
from services.metrics import RECEIPT_RECORDS_READ
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
    settings = state.settings
    async with state.pool.acquire() as conn:
        if await TenantStore(conn, tenant).transaction(tx_id) is None:
            raise unknown_transaction(tx_id)
        known = await known_of(conn, settings.topics.events, tenant, tx_id)
    if not known:
        # Accepted, its first events not projected yet: without them nothing places it on
        # the log but a read of its whole partitions.
        raise ApiError(503, "unavailable", f"tx {tx_id} has no projected events yet; retry later")
    with state.receipt_slots.take("receipts being built"):
        try:
            async with open_reader(settings.kafka_bootstrap, bundle_topics(settings.topics)) as log:
                try:
                    bundle = await bundle_from_log(log, settings.topics, tenant, tx_id, known[0])
                finally:
                    RECEIPT_RECORDS_READ.inc(log.examined)
        except AuditError as error:  # projected but not on this log (another topic prefix)
            raise unknown_transaction(tx_id) from error
        except KafkaError as error:
            raise ApiError(
                503, "unavailable", f"cannot read the log: {error}; retry later"
            ) from error
        evidence = bundle["evidence"]
        if bound_digests(evidence["commands"]):
            async with state.pool.acquire() as conn:
                evidence["previews"] = await stored_previews(
                    conn, tenant, tx_id, evidence["commands"]
                )
    verdict = verify_bundle(bundle, verify_keys(settings.environment))
    return JSONResponse(bundle, headers={"Recon-Verdict": verdict.verdict.value})
