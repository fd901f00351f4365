"""`/v1/transactions` (CONTRACT.md, "Intake API"): submit a transaction, read it and its
events. (Its abort is services.intake.abort.)

An intent is answered 202 only once the broker has acknowledged its SubmitTransaction
(promise 7). The `intents` row, written first, is the guard that turns concurrent or
repeated submissions of one tx_id into one intent and refuses a different body with 409;
Kafka, not the row, is the record of the intent; the row is shown as accepted only once
Kafka has acknowledged it (services.intake.intents).
"""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from services.config import Settings
from services.intake import auth, intents, queries
from services.intake.errors import ApiError, invalid_request, unknown_transaction
from services.intake.example import example_transaction
from services.intake.openapi import TxId, errors, json_body, ok
from services.intake.produce import produce_command
from services.intake.response_models import EventList, SubmissionAccepted, TransactionView
from services.intake.submission import (
    SubmissionRequest,
    check,
    operation_specs,
    submit_command,
)

router = APIRouter()

T = TypeVar("T")


@router.post(
    "/v1/transactions",
    status_code=202,
    responses={**ok(SubmissionAccepted, 202), **errors(401, 409, 413, 422, 503)},
    openapi_extra=json_body(SubmissionRequest, example=example_transaction()),
)
async def submit(request: Request, tenant: str = Depends(auth.tenant)) -> JSONResponse:
    settings: Settings = request.app.state.settings
    # The body is parsed here rather than by FastAPI so that authentication is checked
    # before anything about the body is revealed, malformed JSON included.
    try:
        submission = SubmissionRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from None
    check(submission, settings.providers, settings.approval_required)
    try:
        fingerprint = submission.fingerprint()
    except ValueError:
        raise ApiError(
            422, "invalid_request", "payloads must not contain NaN or Infinity"
        ) from None
    specs = operation_specs(
        submission,
        tenant=tenant,
        environment=settings.environment,
        approval_required=settings.approval_required,
    )
    intent = intents.Intent(tenant, submission.tx_id, fingerprint, submission.agent_id, specs)
    async with request.app.state.pool.acquire() as conn:
        await intents.claim(conn, intent, settings.pending_horizon_s)
    # An identical resubmission produces again: it is harmless (the decider accepts only
    # the first SubmitTransaction of a tx_id) and it covers a crash between the insert
    # above and the broker's acknowledgement of an earlier attempt.
    command = submit_command(
        submission,
        tenant=tenant,
        fingerprint=fingerprint,
        operations=specs,
        issued_at=datetime.now(UTC),
    )
    await produce_command(request.app.state, command, "the intent")
    async with request.app.state.pool.acquire() as conn:
        await intents.mark_produced(conn, intent)
    return JSONResponse(
        {
            "tx_id": submission.tx_id,
            "status": "accepted",
            "operations": [{"action": s.action, "op_key": s.op_key} for s in specs],
        },
        status_code=202,
    )


@router.get(
    "/v1/transactions/{tx_id}",
    responses={**ok(TransactionView), **errors(401, 404, 422, 503)},
    response_model=None,
)
async def get_transaction(
    tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
) -> dict[str, Any]:
    return await _read(request, queries.transaction, tenant, tx_id)


@router.get(
    "/v1/transactions/{tx_id}/events",
    responses={**ok(EventList), **errors(401, 404, 422, 503)},
    response_model=None,
)
async def get_events(
    tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
) -> dict[str, Any]:
    return {"events": await _read(request, queries.events, tenant, tx_id)}


async def _read(
    request: Request,
    query: Callable[[asyncpg.Connection, str, str], Awaitable[T | None]],
    tenant: str,
    tx_id: str,
) -> T:
    async with request.app.state.pool.acquire() as conn:
        found = await query(conn, tenant, tx_id)
    if found is None:
        raise unknown_transaction(tx_id)
    return found
