"""`/v1/transactions` (docs/contract.md, "Intake API"): submit a transaction, read it and its
events. (Its abort is services.intake.abort.)

An intent is answered 202 only once the broker has acknowledged its SubmitTransaction
(promise 7). The `intents` row, written first, is the guard that turns concurrent or
repeated submissions of one tx_id into one intent and refuses a different body with 409;
Kafka, not the row, is the record of the intent; the row is shown as accepted only once
Kafka has acknowledged it (services.intake.intents).
"""

import json
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BeforeValidator

from events.definition import TxStatus
from services.intake import auth, owner_token
from services.intake.accept import accept_submission
from services.intake.errors import ApiError, unknown_transaction
from services.intake.example import example_transaction
from services.intake.openapi import TxId, errors, json_body, ok
from services.intake.pagination import Cursor, Limit, instant, pager
from services.intake.response_models import (
    EventList,
    SubmissionAccepted,
    TransactionList,
    TransactionView,
)
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


Name = Annotated[str | None, Query(min_length=1, max_length=128)]


def _not_a_number(value: Any) -> Any:
    # pydantic reads a bare number as Unix time; the document promises an ISO 8601 time,
    # so `created_before=0.5` is refused (422) rather than read as 1970.
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        raise ValueError("an ISO 8601 time with its offset, not a number")
    return value


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
Instant = Annotated[
    datetime | None,
    BeforeValidator(_not_a_number),
    Query(description="an ISO 8601 time with its offset"),
]


@router.get(
    "/v1/transactions",
    responses={**ok(TransactionList), **errors(401, 422, 503)},
    response_model=None,
)
async def list_transactions(
    request: Request,
    tenant: str = Depends(auth.tenant),
    status: TxStatus | None = None,
    agent_id: Name = None,
    provider: Name = None,
    operation: Name = None,
    created_after: Instant = None,
    created_before: Instant = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """The tenant's transactions, newest first (by when they were accepted), filtered by
    every parameter given; a `provider` or `operation` matches a transaction with such a
    step. Only projected transactions are listed: one accepted a moment ago appears once
    the projector has reached it."""
    for name, at in (("created_after", created_after), ("created_before", created_before)):
        if at is not None and at.tzinfo is None:
            raise ApiError(422, "invalid_request", f"{name}: give the time's offset, e.g. Z")
    filters = {
        "status": status.value if status else None,
        "agent_id": agent_id,
        "provider": provider,
        "operation": operation,
        "created_after": created_after.isoformat() if created_after else None,
        "created_before": created_before.isoformat() if created_before else None,
    }
    page = pager(request, "transactions", tenant, filters, limit, cursor, default=100)
    after = page.after()
    async with request.app.state.pool.acquire() as conn:
        rows = await TenantStore(conn, tenant).transactions(
            status=filters["status"],
            agent_id=agent_id,
            provider=provider,
            operation=operation,
            created_after=created_after,
            created_before=created_before,
            before=None if after is None else (instant(after[0]), after[1]),
            limit=page.limit + 1,
        )
    shown, next_cursor = page.page(rows, lambda r: [r["created_at"].isoformat(), r["tx_id"]])
    return {
        "transactions": [
            {
                "tx_id": row["tx_id"],
                "status": row["status"],
                "agent_id": row["agent_id"],
                "created_at": row["created_at"].isoformat(),
                "updated_at": row["updated_at"].isoformat(),
                "operations": json.loads(row["operations"]),
            }
            for row in shown
        ],
        "next_cursor": next_cursor,
    }


@router.get(
    "/v1/transactions/{tx_id}/events",
    responses={**ok(EventList), **errors(401, 404, 422, 503)},
    response_model=None,
)
async def get_events(
    tx_id: TxId,
    request: Request,
    tenant: str = Depends(auth.tenant),
    limit: Limit = None,
    cursor: Cursor = None,
) -> dict[str, Any]:
    page = pager(request, "events", tenant, {"tx_id": tx_id}, limit, cursor, default=1000)
    after = page.after()
    after_seq = 0 if after is None else int(after[0])

    async def read(store: TenantStore, tx: str) -> list[dict[str, Any]] | None:
        return await store.events(tx, after_seq=after_seq, limit=page.limit + 1)

    rows = await _read(request, read, tenant, tx_id)
    shown, next_cursor = page.page(rows, lambda e: [e["seq"]])
    return {"events": shown, "next_cursor": next_cursor}


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
