"""`/v1/transactions` (docs/contract.md, "Intake API"): submit a transaction, read it and its
events. (Its abort is services.intake.abort.)

An intent is answered 202 only once the broker has acknowledged its SubmitTransaction
(promise 7). The `intents` row, written first, is the guard that turns concurrent or
repeated submissions of one tx_id into one intent and refuses a different body with 409;
Kafka, not the row, is the record of the intent; the row is shown as accepted only once
Kafka has acknowledged it (services.intake.intents).
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from services.intake import auth, owner_token
from services.intake.accept import accept_submission
from services.intake.errors import unknown_transaction
from services.intake.example import example_transaction
from services.intake.openapi import TxId, errors, json_body, ok
from services.intake.response_models import EventList, SubmissionAccepted, TransactionView
from services.intake.submission import SubmissionRequest
from services.intake.tenant_store import TenantStore

router = APIRouter()

T = TypeVar("T")


@router.post(
    "/v1/transactions",
    status_code=202,
    responses={**ok(SubmissionAccepted, 202), **errors(401, 403, 409, 413, 422, 503)},
    openapi_extra=json_body(SubmissionRequest, example=example_transaction()),
)
async def submit(
    request: Request, who: Annotated[auth.Principal, Depends(auth.principal)]
) -> JSONResponse:
    # The body is read here rather than by FastAPI so that authentication is checked
    # before anything about the body is revealed, malformed JSON included.
    tenant = who.tenant
    answer = await accept_submission(request.app.state, tenant, await request.body(), who=who)
    # Only the submitter's answer carries the token: it is what the session's later
    # commands prove ownership with (issue 18, item 5).
    owner = answer["owner"]
    owner["owner_token"] = owner_token.owner_token(
        request.app.state.settings.owner_token_secret,
        tenant,
        answer["tx_id"],
        owner["agent_id"],
        owner["session_id"],
    )
    return JSONResponse(answer, status_code=202)


@router.get(
    "/v1/transactions/{tx_id}",
    responses={**ok(TransactionView), **errors(401, 404, 422, 503)},
    response_model=None,
)
async def get_transaction(
    tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
) -> dict[str, Any]:
    return await _read(request, TenantStore.transaction, tenant, tx_id)


@router.get(
    "/v1/transactions/{tx_id}/events",
    responses={**ok(EventList), **errors(401, 404, 422, 503)},
    response_model=None,
)
async def get_events(
    tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
) -> dict[str, Any]:
    return {"events": await _read(request, TenantStore.events, tenant, tx_id)}


async def _read(
    request: Request,
    query: Callable[[TenantStore, str], Awaitable[T | None]],
    tenant: str,
    tx_id: str,
) -> T:
    async with request.app.state.pool.acquire() as conn:
        found = await query(TenantStore(conn, tenant), tx_id)
    if found is None:
        raise unknown_transaction(tx_id)
    return found
