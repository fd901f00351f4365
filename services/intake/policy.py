"""`/v1/policy`, `/v1/quotas` (docs/contract.md, "v1 additions"): a tenant's policy document,
read by anyone of the tenant, replaced by its operators only; its quotas' usage and breakers.
The grant check of submissions is services.intake.submission_gate's (this module answers its
refusal with 403, `install`).

A change is written to Postgres (what is in force) and produced to recon.governance (its
record) in one step: the row is written inside a database transaction, the record is
produced and acknowledged, then the transaction commits. Kafka refusing: the row is rolled
back and the answer is 503 (nothing changed). A crash between the acknowledgement and the
commit leaves a record of a change that never took effect (the client got no 2xx and
retries: a replay of the same document carries the same change id); the other way round,
a change in force with no record, cannot happen.

The transaction is open while Kafka acknowledges, holding what the change wrote: the
tenant's policy row (another install of the tenant's policy, through the API or another
intake's start-up file, waits at it), a kill switch's row (another release of it waits), a
breaker's row (a dispatcher's quota reservation of its agent and operation that finds it
tripped waits at it, holding the advisory lock every reservation of that pair takes). So it
is opened by `changing`: a holder that stopped without closing its connection (its host
lost, frozen) has its session ended by Postgres after CHANGE_IDLE_BOUND_S idle, the change
rolls back, and the waiters go on, as after a crash before the commit.
"""

import json
import logging
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from events.catalog import Catalog
from events.governance import BreakerReset, GovernanceChange, PolicyReplaced
from events.policy import PolicyDocument, open_policy
from projections.held_open import held_open
from services.config import Settings
from services.governance import store
from services.intake import auth
from services.intake.errors import ApiError, parsed
from services.intake.openapi import errors, json_body, ok
from services.intake.produce import PRODUCE_TIMEOUT_S, produce_acked
from services.intake.submission_gate import GateRefused
from services.providers.registry import catalog_of

log = logging.getLogger(__name__)
router = APIRouter()


def install(app: FastAPI) -> None:
    @app.exception_handler(GateRefused)
    async def gate_refused(request: Request, exc: GateRefused) -> JSONResponse:
        return JSONResponse(exc.refusal.body(), status_code=exc.status)


def operator(who: Annotated[auth.Principal, Depends(auth.principal)]) -> auth.Principal:
    """FastAPI dependency: an operator key of the tenant; an agent key gets 403."""
    if not who.is_operator:
        raise ApiError(
            403, "operator_only", "only an operator key (RECON_OPERATOR_KEYS) may do this"
        )
    return who


# How long a change's transaction may sit idle, waiting on its holder, before Postgres ends
# the holder's session and so the change (projections.held_open). A live holder is idle in
# it while Kafka acknowledges the record, at most PRODUCE_TIMEOUT_S (produce_acked then
# answers 503 and the change rolls back); three times that leaves a loaded intake's slow
# event loop room, and cuts only a holder that stopped, which would otherwise hold the rows
# its change wrote until the kernel's keepalive gave up on it (about two hours).
CHANGE_IDLE_BOUND_S = 3 * PRODUCE_TIMEOUT_S


def changing(
    conn: asyncpg.Connection, idle_bound_s: float = CHANGE_IDLE_BOUND_S
) -> AbstractAsyncContextManager[None]:
    """The transaction a governance change is written in while its record is produced."""
    return held_open(conn, idle_bound_s)


async def produce_change(request: Request, change: GovernanceChange, what: str) -> None:
    settings: Settings = request.app.state.settings
    await produce_acked(
        request.app.state.producer,
        settings.topics.governance,
        change.tenant.encode(),
        change.model_dump_json().encode(),
        what,
    )


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


# --- routes -------------------------------------------------------------------------------


class PolicyView(BaseModel):
    model_config = ConfigDict(extra="allow")

    version: int = Field(description="0 while no document is installed (everything granted)")
    configured: bool
    document: dict[str, Any]


@router.get("/v1/policy", responses={**ok(PolicyView), **errors(401, 503)}, response_model=None)
async def get_policy(request: Request, tenant: str = Depends(auth.tenant)) -> dict[str, Any]:
    async with request.app.state.pool.acquire() as conn:
        installed = await store.policy_of(conn, tenant)
    if installed is None:
        return {
            "version": 0,
            "configured": False,
            "document": open_policy(catalog_of(request.app.state.settings).names()).model_dump(
                mode="json"
            ),
        }
    return {
        "version": installed.document.version,
        "configured": True,
        "digest": installed.digest,
        "set_by": installed.actor,
        "set_at": installed.set_at,
        "document": installed.document.model_dump(mode="json"),
    }


@router.put(
    "/v1/policy",
    responses={**ok(PolicyView), **errors(401, 403, 409, 413, 422, 503)},
    openapi_extra=json_body(PolicyDocument),
    response_model=None,
)
async def put_policy(
    request: Request, who: Annotated[auth.Principal, Depends(operator)]
) -> dict[str, Any]:
    document = parsed(await request.body(), PolicyDocument)
    refuse_unknown_operations(document, catalog_of(request.app.state.settings))
    assert who.operator is not None
    await install_policy(request, who.tenant, document, who.operator)
    return await get_policy(request, who.tenant)


def refuse_unknown_operations(document: PolicyDocument, catalog: Catalog) -> None:
    """422 `unknown_operation` when the document grants or limits an operation no
    configured provider offers: a typo would otherwise grant nothing, silently."""
    unknown = sorted(document.operations() - set(catalog.names()))
    if unknown:
        raise ApiError(
            422,
            "unknown_operation",
            f"the policy names operations no configured provider offers: {', '.join(unknown)}; "
            f"known operations (GET /v1/catalog): {', '.join(catalog.names())}",
        )


async def install_policy(
    request: Request, tenant: str, document: PolicyDocument, actor: str
) -> None:
    """Install `document` as the tenant's next version and record it, or 409."""
    async with request.app.state.pool.acquire() as conn, changing(conn):
        if not await store.replace_policy(conn, tenant, document, actor):
            current = await store.current_version(conn, tenant)
            raise ApiError(
                409,
                "stale_version",
                f"the policy is at version {current}; send version {current + 1} "
                "(read it again with GET /v1/policy first)",
            )
        digest = store.policy_digest(document)
        await produce_change(
            request,
            PolicyReplaced(
                change_id=f"policy:{tenant}:{document.version}:{digest}",
                tenant=tenant,
                version=document.version,
                digest=digest,
                document=document.model_dump(mode="json"),
                actor=actor,
                at=now_iso(),
            ),
            "the policy change",
        )


class QuotaList(BaseModel):
    model_config = ConfigDict(extra="allow")

    quotas: list[dict[str, Any]]


@router.get("/v1/quotas", responses={**ok(QuotaList), **errors(401, 503)}, response_model=None)
async def get_quotas(request: Request, tenant: str = Depends(auth.tenant)) -> dict[str, Any]:
    async with request.app.state.pool.acquire() as conn:
        installed = await store.policy_of(conn, tenant)
        if installed is None:
            return {"quotas": []}
        return {"quotas": await store.quota_usage(conn, tenant, installed.document)}


class BreakerResetRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: Annotated[str, Field(min_length=1, max_length=128)]
    operation: Annotated[str, Field(min_length=1, max_length=128)]


@router.post(
    "/v1/quotas/breakers/reset",
    responses={**ok(QuotaList), **errors(401, 403, 404, 413, 422, 503)},
    openapi_extra=json_body(BreakerResetRequest),
    response_model=None,
)
async def reset_breaker(
    request: Request, who: Annotated[auth.Principal, Depends(operator)]
) -> dict[str, Any]:
    """Close a tripped breaker: new dispatches of that agent and operation count against
    the quota again. What it held stays in review; resolve each (`retry` re-checks the
    quota, `not_applied` fails it)."""
    body = parsed(await request.body(), BreakerResetRequest)
    assert who.operator is not None
    async with request.app.state.pool.acquire() as conn, changing(conn):
        tripped = await store.reset_breaker(conn, who.tenant, body.agent_id, body.operation)
        if tripped is None:
            raise ApiError(404, "not_found", "no breaker is open for that agent and operation")
        await produce_change(
            request,
            BreakerReset(
                change_id=f"breaker:{who.tenant}:{body.agent_id}:{body.operation}:{tripped}:reset",
                tenant=who.tenant,
                agent_id=body.agent_id,
                operation=body.operation,
                actor=who.operator,
                at=now_iso(),
            ),
            "the breaker reset",
        )
    return await get_quotas(request, who.tenant)


# --- the document given at start-up --------------------------------------------------------


def read_policy_file(path: str) -> dict[str, PolicyDocument]:
    """RECON_POLICY_FILE: `{"<tenant>": <policy document>, ...}`."""
    raw = json.loads(Path(path).read_text())
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected an object of tenant -> policy document")
    return {tenant: PolicyDocument.model_validate(doc) for tenant, doc in raw.items()}


async def install_file(app: FastAPI, path: str) -> None:
    """Install each tenant's document of the file when its version is later than the one
    in force: restarting with the same file changes nothing, and a later version set
    through the API is not rolled back by an old file."""
    for tenant, document in read_policy_file(path).items():
        async with app.state.pool.acquire() as conn, changing(conn):
            if not await store.replace_policy(
                conn, tenant, document, f"file:{path}", newer_only=True
            ):
                continue  # that version or a later one is in force already
            digest = store.policy_digest(document)
            settings: Settings = app.state.settings
            await produce_acked(
                app.state.producer,
                settings.topics.governance,
                tenant.encode(),
                PolicyReplaced(
                    change_id=f"policy:{tenant}:{document.version}:{digest}",
                    tenant=tenant,
                    version=document.version,
                    digest=digest,
                    document=document.model_dump(mode="json"),
                    actor=f"file:{path}",
                    at=now_iso(),
                )
                .model_dump_json()
                .encode(),
                "the policy file",
            )
            log.info("policy of tenant %s: version %d from %s", tenant, document.version, path)
