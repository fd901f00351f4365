"""`/v1/kill-switches` (docs/contract.md, "v1 additions"): an operator stops every new dispatch
of the tenant, or of one agent, provider or operation (the fields of `scope`, all of which
must match; an empty scope is the whole tenant), and releases it later.

A switch is in force once this route answers 201 (it answers after the switch row is
committed): every provider call is begun by one statement that checks the engaged switches
and records the call (services.dispatcher.calls_begun), so no call begun after the answer
reaches a provider for the switch's scope. Dispatches it stops are held, never dropped, and are
dispatched when it is released. Engaging and releasing are records on recon.governance,
written as policy changes are (services.intake.policy).
"""

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from events.governance import KillSwitchEngaged, KillSwitchReleased
from services.governance import store
from services.intake import auth
from services.intake.errors import ApiError, parsed
from services.intake.openapi import errors, json_body, ok
from services.intake.policy import changing, operator, produce_change

router = APIRouter()

Name = Annotated[str, Field(min_length=1, max_length=128)]


class KillSwitchScope(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: Name | None = None
    provider: Name | None = None
    operation: Name | None = None


class KillSwitchRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    scope: KillSwitchScope = KillSwitchScope()
    reason: Annotated[str, Field(min_length=1, max_length=1000)]


class KillSwitchView(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    scope: dict[str, str]
    state: str = Field(description="`engaged` or `released`")
    held: int = Field(description="dispatches it holds now")


class KillSwitchList(BaseModel):
    kill_switches: list[KillSwitchView]


@router.post(
    "/v1/kill-switches",
    status_code=201,
    responses={**ok(KillSwitchView, 201), **errors(401, 403, 413, 422, 503)},
    openapi_extra=json_body(KillSwitchRequest),
    response_model=None,
)
async def engage(
    request: Request, who: Annotated[auth.Principal, Depends(operator)]
) -> JSONResponse:
    body = parsed(await request.body(), KillSwitchRequest)
    assert who.operator is not None
    switch_id = f"ks_{uuid.uuid4().hex}"
    scope = body.scope.model_dump(exclude_none=True)
    async with request.app.state.pool.acquire() as conn, conn.transaction():
        at = await store.engage(conn, switch_id, who.tenant, scope, body.reason, who.operator)
        await produce_change(
            request,
            KillSwitchEngaged(
                change_id=f"kill:{switch_id}:engaged",
                tenant=who.tenant,
                switch_id=switch_id,
                scope=scope,
                reason=body.reason,
                actor=who.operator,
                at=at,
            ),
            "the kill switch",
        )
    return JSONResponse(
        {"id": switch_id, "scope": scope, "state": "engaged", "engaged_at": at, "held": 0},
        status_code=201,
    )


@router.get(
    "/v1/kill-switches",
    responses={**ok(KillSwitchList), **errors(401, 503)},
    response_model=None,
)
async def list_switches(request: Request, tenant: str = Depends(auth.tenant)) -> dict[str, Any]:
    async with request.app.state.pool.acquire() as conn:
        return {"kill_switches": await store.list_switches(conn, tenant)}


@router.delete(
    "/v1/kill-switches/{switch_id}",
    responses={**ok(KillSwitchView), **errors(401, 403, 404, 422, 503)},
    response_model=None,
)
async def release(
    switch_id: str, request: Request, who: Annotated[auth.Principal, Depends(operator)]
) -> dict[str, Any]:
    """Release: held dispatches go out (each dispatcher claims them within a second). A
    switch already released answers as it is, so a retried release is harmless."""
    assert who.operator is not None
    # Its row is held while Kafka acknowledges: another release of the switch waits at it.
    async with request.app.state.pool.acquire() as conn, changing(conn):
        at = await store.release(conn, who.tenant, switch_id, who.operator)
        if at is None and not await store.switch_exists(conn, who.tenant, switch_id):
            raise ApiError(404, "not_found", f"no kill switch {switch_id!r} for this tenant")
        if at is not None:
            await produce_change(
                request,
                KillSwitchReleased(
                    change_id=f"kill:{switch_id}:released",
                    tenant=who.tenant,
                    switch_id=switch_id,
                    actor=who.operator,
                    at=at,
                ),
                "the kill switch release",
            )
        found = [s for s in await store.list_switches(conn, who.tenant) if s["id"] == switch_id]
    return found[0]
