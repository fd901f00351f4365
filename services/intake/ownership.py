"""Agent sessions through the API (issue 12, item 1; CONTRACT.md "v1 additions"):
`POST /v1/transactions/{tx_id}/claim` and `/release`, and the fence every session-bearing
command passes (an abort).

The decider decides (services.decider.ownership, on the commands' `issued_at`); the intake
answers from the log as projected (`events`), which may lag it by a moment. So a claim the
intake lets through may still be refused on the log (`CommandRefused`, reason
`lease_held`), and a fenced session's command is produced all the same, so that its
refusal is recorded on the transaction's chain, before it is answered `409 fenced`.
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, TypeVar

import asyncpg
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from events.definition import ACTION_PATTERN, Leg, TxStatus
from events.inputs import ClaimTransaction, ReleaseTransaction, RequestReview
from events.keys import agent_review_id, claim_id, release_id
from services.config import Settings
from services.intake import auth
from services.intake.errors import ApiError, parsed, unknown_transaction
from services.intake.openapi import TxId, errors, json_body, ok
from services.intake.produce import produce_command
from services.intake.submission import SESSION_PATTERN

router = APIRouter()
M = TypeVar("M", bound=BaseModel)

FINISHED = {TxStatus.COMMITTED.value, TxStatus.FAILED.value, TxStatus.COMPENSATED.value}


class SessionRequest(BaseModel):
    """Who asks: an agent and its session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: Annotated[str, Field(min_length=1, max_length=128)]
    session_id: Annotated[str, Field(pattern=SESSION_PATTERN)]


class ClaimAnswer(BaseModel):
    tx_id: str
    status: str = Field(description="`claim_requested` (`release_requested` for /release)")
    agent_id: str
    session_id: str
    previous_session_id: str | None = None


@dataclass(frozen=True)
class Owner:
    agent_id: str
    session_id: str | None  # None: accepted before sessions existed
    lease_expires_at: datetime | None
    released: bool


async def current_owner(conn: asyncpg.Connection, tenant: str, tx_id: str) -> Owner | None:
    """The owner as the projected log shows it; None when no event of the tx is projected."""
    row = await conn.fetchrow(
        "SELECT type, data FROM events WHERE tenant = $1 AND tx_id = $2 AND type IN"
        " ('TransactionAccepted', 'TransactionClaimed', 'OwnershipReleased')"
        " ORDER BY seq DESC LIMIT 1",
        tenant,
        tx_id,
    )
    if row is None:
        return None
    data = json.loads(row["data"])
    until = data.get("lease_expires_at")
    return Owner(
        agent_id=data["agent_id"],
        session_id=data.get("session_id"),
        lease_expires_at=datetime.fromisoformat(until) if until else None,
        released=row["type"] == "OwnershipReleased",
    )


def is_fenced(owner: Owner | None, agent_id: str | None, session_id: str | None) -> bool:
    """The decider's rule (services.decider.ownership.fence), as far as the projection
    shows: a command naming a session that does not own the transaction."""
    if session_id is None or owner is None or owner.session_id is None:
        return False
    return (agent_id, session_id) != (owner.agent_id, owner.session_id)


def fenced_error(owner: Owner) -> ApiError:
    return ApiError(
        409,
        "fenced",
        f"this session does not own the transaction: session {owner.session_id} of"
        f" {owner.agent_id} does (it claimed it); the command was refused and recorded",
    )


@router.post(
    "/v1/transactions/{tx_id}/claim",
    responses={**ok(ClaimAnswer), **errors(401, 404, 409, 413, 422, 503)},
    openapi_extra=json_body(SessionRequest),
)
async def claim(
    tx_id: TxId, request: Request, key: Annotated[auth.Principal, Depends(auth.principal)]
) -> JSONResponse:
    """Take over a transaction whose owner's lease lapsed or was handed off; the owner's
    own claim renews its lease. `409 lease_held` while another session's lease holds."""
    settings: Settings = request.app.state.settings
    tenant = key.tenant
    who = parsed(await request.body(), SessionRequest)
    key.speak_for(who.agent_id)
    async with request.app.state.pool.acquire() as conn:
        status = await conn.fetchval(
            "SELECT status FROM transactions WHERE tenant = $1 AND tx_id = $2", tenant, tx_id
        )
        owner = await current_owner(conn, tenant, tx_id)
    if status is None:
        raise unknown_transaction(tx_id)
    if status in FINISHED:
        raise ApiError(
            409, "transaction_finished", f"transaction {tx_id!r} is {status}: nothing to take over"
        )
    now = datetime.now(UTC)
    mine = owner is not None and (owner.agent_id, owner.session_id) == (
        who.agent_id,
        who.session_id,
    )
    if (
        owner is not None
        and not mine
        and not owner.released
        and owner.lease_expires_at is not None
        and now < owner.lease_expires_at
    ):
        raise ApiError(
            409,
            "lease_held",
            f"session {owner.session_id} of {owner.agent_id} holds the lease until"
            f" {owner.lease_expires_at.isoformat()}; claim once it lapses or is handed off",
        )
    command = ClaimTransaction(
        message_id=claim_id(tenant, tx_id, who.session_id, now.isoformat()),
        tenant=tenant,
        tx_id=tx_id,
        agent_id=who.agent_id,
        session_id=who.session_id,
        lease_s=settings.owner_lease_s,
        issued_at=now,
    )
    await produce_command(request.app.state, command, "the claim")
    return JSONResponse(
        {
            "tx_id": tx_id,
            "status": "claim_requested",
            "agent_id": who.agent_id,
            "session_id": who.session_id,
            "previous_session_id": owner.session_id if owner else None,
        }
    )


@router.post(
    "/v1/transactions/{tx_id}/release",
    status_code=202,
    responses={**ok(ClaimAnswer, 202), **errors(401, 404, 409, 413, 422, 503)},
    openapi_extra=json_body(SessionRequest),
)
async def release(
    tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
) -> JSONResponse:
    """The owner hands the transaction off: a successor may claim it at once."""
    who = parsed(await request.body(), SessionRequest)
    async with request.app.state.pool.acquire() as conn:
        owner = await current_owner(conn, tenant, tx_id)
    if owner is None:
        raise unknown_transaction(tx_id)
    command = ReleaseTransaction(
        message_id=release_id(tenant, tx_id, who.session_id),
        tenant=tenant,
        tx_id=tx_id,
        agent_id=who.agent_id,
        session_id=who.session_id,
        issued_at=datetime.now(UTC),
    )
    await produce_command(request.app.state, command, "the release")
    if is_fenced(owner, who.agent_id, who.session_id):
        raise fenced_error(owner)
    return JSONResponse(
        {
            "tx_id": tx_id,
            "status": "release_requested",
            "agent_id": who.agent_id,
            "session_id": who.session_id,
        },
        status_code=202,
    )


class ReviewAsked(SessionRequest):
    """A session asks a person to look at one of its operations in flight."""

    action: Annotated[str, Field(pattern=ACTION_PATTERN)]
    reason: Annotated[str, Field(min_length=1, max_length=1000)] = "requested by the agent"


@router.post(
    "/v1/transactions/{tx_id}/review",
    status_code=202,
    responses={**ok(ClaimAnswer, 202), **errors(401, 404, 409, 413, 422, 503)},
    openapi_extra=json_body(ReviewAsked),
)
async def ask_review(
    tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
) -> JSONResponse:
    """The owner asks for manual review of an operation that is `dispatched` or
    `unknown` (what a successor does rather than guess). `409 operation_not_in_flight`
    otherwise; `409 fenced` from a session that does not own the transaction."""
    who = parsed(await request.body(), ReviewAsked)
    async with request.app.state.pool.acquire() as conn:
        owner = await current_owner(conn, tenant, tx_id)
        row = await conn.fetchrow(
            "SELECT op_key, state, attempts FROM operations"
            " WHERE tenant = $1 AND tx_id = $2 AND action = $3",
            tenant,
            tx_id,
            who.action,
        )
    if owner is None or row is None:
        raise unknown_transaction(tx_id)
    fenced = is_fenced(owner, who.agent_id, who.session_id)
    if not fenced and row["state"] not in ("dispatched", "unknown"):
        raise ApiError(
            409,
            "operation_not_in_flight",
            f"{who.action!r} is {row['state']}: only an operation in flight can be reviewed",
        )
    command = RequestReview(
        message_id=agent_review_id(row["op_key"], row["attempts"], who.session_id),
        tenant=tenant,
        tx_id=tx_id,
        action=who.action,
        leg=Leg.FORWARD,
        attempt=row["attempts"],
        reason=f"requested_by_agent: {who.reason}",
        issued_at=datetime.now(UTC),
        agent_id=who.agent_id,
        session_id=who.session_id,
    )
    await produce_command(request.app.state, command, "the review request")
    if fenced:
        raise fenced_error(owner)
    return JSONResponse(
        {
            "tx_id": tx_id,
            "status": "review_requested",
            "agent_id": who.agent_id,
            "session_id": who.session_id,
        },
        status_code=202,
    )
