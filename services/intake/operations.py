"""`GET /v1/operations/{op_key}` (docs/contract.md, "v1 additions"): one id finds everything
recon holds about an operation, its durable record (services.intake.operation_record).
Tenant-scoped: another tenant's key answers 404, exactly like a key that does not exist.
Either of an operation's keys finds it (its own, or its undo's)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request

from events.catalog import Catalog
from events.policy import open_policy
from services.governance import store as governance
from services.governance.gate import is_granted
from services.intake import auth
from services.intake.errors import ApiError
from services.intake.openapi import errors, ok
from services.intake.operation_models import OperationRecord
from services.intake.operation_record import operation_record
from services.intake.tenant_store import TenantStore
from services.providers.registry import catalog_of

router = APIRouter()

OpKey = Annotated[
    str,
    Path(
        max_length=256,
        openapi_examples={"an operation key": {"value": "rk1_0000000000000000"}},
    ),
]


@router.get(
    "/v1/operations/{op_key}",
    responses={**ok(OperationRecord), **errors(401, 404, 422, 503)},
    response_model=None,
)
async def get_operation(
    op_key: OpKey, request: Request, tenant: str = Depends(auth.tenant)
) -> dict[str, Any]:
    async with request.app.state.pool.acquire() as conn:
        found = await _record(
            TenantStore(conn, tenant), op_key, catalog_of(request.app.state.settings)
        )
    if found is None:
        raise ApiError(
            404, "not_found", f"no operation {op_key!r} for this API key's tenant; check the key"
        )
    return found


async def _record(store: TenantStore, op_key: str, catalog: Catalog) -> dict[str, Any] | None:
    row = await store.operation(op_key)
    if row is None:
        return None
    record = operation_record(op_key, row["action"], await store.events(row["tx_id"]) or [])
    if record is None:
        return None
    installed = await governance.policy_of(store.conn, store.tenant)
    return {
        "tx_id": row["tx_id"],
        "state": row["state"],
        "grant": _grant(installed, record, catalog),
        "transaction_status": row["status"],
        "remote_id": row["remote_id"],
        **record,
    }


def _grant(
    installed: governance.Installed | None, record: dict[str, Any], catalog: Catalog
) -> dict[str, Any]:
    """Whether the submitting agent holds a grant for this operation under the tenant's
    policy as installed now (version 0: no document, everything granted). The policy
    history is not kept, so this is today's reading, not the one at acceptance; the
    acceptance itself proves the grant held then (an ungranted submission is refused)."""
    policy = installed.document if installed is not None else open_policy(catalog.names())
    agent_id = record["approved"]["submitted_by"].get("agent_id") or ""
    operation = record["approved"]["operation"]
    return {
        "agent_id": agent_id,
        "operation": operation,
        "policy_version": policy.version,
        "granted": is_granted(
            policy,
            agent_id,
            operation,
            catalog.facts(record["approved"].get("provider", ""), operation).side_effect,
        ),
    }
