"""Agent sessions through the API (issue 12, item 1; issue 18, items 5, 8, 16):
`POST /v1/transactions/{tx_id}/claim` and `/release`, and the fence every session-bearing
command passes (an abort, a review request).

The decider decides (transactions.ownership, on the commands' `issued_at`); the intake
asks that same rule first, on the transaction as it can see it (`known_transaction`: the
intents row, so a claim right after the submission's 202 is judged like any other, and the
owner and count the projector keeps in the transaction's row by the decider's own rules,
which may lag the decider by a moment). So a claim the intake lets through
may still be refused on the log (`CommandRefused`, reason `lease_held`), and a fenced
session's command is produced all the same, so that its refusal is recorded on the
transaction's chain, before it is answered `409 fenced`. A session proves it is the one it
names with its owner token (services.intake.owner_token); a claimant must be granted every
operation of the transaction (services.governance.gate.successor_refusal).
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from events.definition import ACTION_PATTERN, Leg, OperationSpec, TxStatus
from events.inputs import ClaimTransaction, ReleaseTransaction, RequestReview
from events.keys import agent_review_id, claim_id, release_id
from events.transaction_events import CommandRefused
from services.config import Settings
from services.governance.gate import successor_refusal
from services.intake import auth, owner_token, submission_gate
from services.intake.errors import ApiError, parsed, unknown_transaction
from services.intake.openapi import TxId, errors, json_body, ok
from services.intake.produce import produce_command
from services.intake.session_cap import refuse_past_cap
from services.intake.submission import SESSION_PATTERN
from services.intake.tenant_store import TenantStore
from services.providers.registry import catalog_of
from transactions import ownership as rules

router = APIRouter()
M = TypeVar("M", bound=BaseModel)


class SessionRequest(BaseModel):
    """Who asks: an agent and its session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: Annotated[str, Field(min_length=1, max_length=128)]
    session_id: Annotated[str, Field(pattern=SESSION_PATTERN)]
    # The session's owner token (services.intake.owner_token): required by /release and
    # /review, and by /claim when it renews the owner's own lease; a take-over's claim
    # needs none and gets one.
    owner_token: Annotated[str | None, Field(min_length=1, max_length=128)] = None


class ClaimAnswer(BaseModel):
    tx_id: str
    status: str = Field(description="`claim_requested` (`release_requested` for /release)")
    agent_id: str
    session_id: str
    previous_session_id: str | None = None
    owner_token: str | None = Field(
        default=None, description="the claimant's owner token (the claim's answer only)"
    )


def fenced_error(refusal: CommandRefused) -> ApiError:
    return ApiError(409, "fenced", f"{refusal.rule}; the command was refused and recorded")


def check_token(settings: Settings, tenant: str, tx_id: str, who: SessionRequest) -> None:
    owner_token.check(
        settings.owner_token_secret, tenant, tx_id, who.agent_id, who.session_id, who.owner_token
    )


@dataclass(frozen=True)
class Known:
    """An accepted transaction as the claim's judge needs it."""

    status: TxStatus
    owner: rules.Owner | None
    operations: tuple[OperationSpec, ...]
    # Counted by the decider's own declaration (transactions.input_bounds.SESSION_CAUSED).
    session_events: int = 0

    def refuse_past_cap(
        self, command: str, agent_id: str | None, session_id: str | None, *, by_agent: bool
    ) -> None:
        """`429 too_many_commands` when the decider would not judge this command."""
        refuse_past_cap(
            self.session_events, self.owner, command, agent_id, session_id, by_agent=by_agent
        )


async def known_transaction(store: TenantStore, tx_id: str, lease_s: int) -> Known | None:
    """The transaction from its intents row and its projected row, or None when it was
    never accepted. The row's owner and count are the decider's fold of the chain, kept by
    the projector (projections.session_row): one read, where folding the chain here cost
    each session request time in its length (docs/benchmark.md, "A session's command and
    its transaction's chain"). A row projected before it kept them is folded here as before.
    Read your writes (issue 18, item 16): right after the submission's 202 the projection
    may show nothing yet, and the transaction is then `accepted`, owned by its submitting
    session for a lease from the submission's produce."""
    intent = await store.produced_intent(tx_id)
    if intent is None:
        return None
    operations = tuple(OperationSpec.model_validate(op) for op in json.loads(intent["operations"]))
    row = await store.sessions(tx_id)
    if row is not None and row.session_events is not None:
        return Known(row.status, row.owner, operations, row.session_events)
    state = await store.projected_state(tx_id) if row is not None else None
    if state is not None:
        return Known(
            state.status or TxStatus.ACCEPTED, state.owner, operations, state.session_events
        )
    owner = None
    if intent["session_id"] is not None:
        owner = rules.Owner(
            agent_id=intent["agent_id"],
            session_id=intent["session_id"],
            lease_expires_at=intent["attempted_at"] + timedelta(seconds=lease_s),
        )
    return Known(TxStatus.ACCEPTED, owner, operations)


@router.post(
    "/v1/transactions/{tx_id}/claim",
    responses={**ok(ClaimAnswer), **errors(401, 403, 404, 409, 413, 422, 429, 503)},
    openapi_extra=json_body(SessionRequest),
)
async def claim(
    tx_id: TxId, request: Request, key: Annotated[auth.Principal, Depends(auth.principal)]
) -> JSONResponse:
    """Take over a transaction whose owner's lease lapsed or was handed off; the owner's
    own claim renews its lease. `409 lease_held` while another session's lease holds;
    `403 not_granted` when the claiming agent is not granted every operation of the
    transaction (the successor is the one governed from then on)."""
    settings: Settings = request.app.state.settings
    tenant = key.tenant
    who = parsed(await request.body(), SessionRequest)
    key.speak_for(who.agent_id)
    async with request.app.state.pool.acquire() as conn:
        known = await known_transaction(TenantStore(conn, tenant), tx_id, settings.owner_lease_s)
        catalog = catalog_of(settings)
        document = (await submission_gate.in_force(conn, tenant, catalog)).document
    if known is None:
        raise unknown_transaction(tx_id)
    refusal = successor_refusal(document, catalog, who.agent_id, known.operations)
    if refusal is not None:
        raise submission_gate.GateRefused(refusal)
    if known.owner is not None and (known.owner.agent_id, known.owner.session_id) == (
        who.agent_id,
        who.session_id,
    ):
        # A renewal: the owner's name is readable by every agent key, so only its token
        # may renew (and keep) the lease.
        check_token(settings, tenant, tx_id, who)
    now = datetime.now(UTC)
    command = ClaimTransaction(
        message_id=claim_id(tenant, tx_id, who.session_id, now.isoformat()),
        tenant=tenant,
        tx_id=tx_id,
        agent_id=who.agent_id,
        session_id=who.session_id,
        lease_s=settings.owner_lease_s,
        issued_at=now,
    )
    known.refuse_past_cap(command.type, who.agent_id, who.session_id, by_agent=True)
    # The decider's own rule, on what the intake can see (it may lag the log by a moment:
    # a claim let through here may still be refused on the log, and recorded there).
    for verdict in rules.claim(known.owner, known.status, command):
        if isinstance(verdict, CommandRefused):
            raise ApiError(409, verdict.reason, verdict.rule)
    await produce_command(request.app.state, command, "the claim")
    return JSONResponse(
        {
            "tx_id": tx_id,
            "status": "claim_requested",
            "agent_id": who.agent_id,
            "session_id": who.session_id,
            "previous_session_id": known.owner.session_id if known.owner else None,
            "owner_token": owner_token.owner_token(
                settings.owner_token_secret, tenant, tx_id, who.agent_id, who.session_id
            ),
        }
    )


@router.post(
    "/v1/transactions/{tx_id}/release",
    status_code=202,
    responses={**ok(ClaimAnswer, 202), **errors(401, 403, 404, 409, 413, 422, 429, 503)},
    openapi_extra=json_body(SessionRequest),
)
async def release(
    tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
) -> JSONResponse:
    """The owner hands the transaction off: a successor may claim it at once."""
    settings: Settings = request.app.state.settings
    who = parsed(await request.body(), SessionRequest)
    async with request.app.state.pool.acquire() as conn:
        known = await known_transaction(TenantStore(conn, tenant), tx_id, settings.owner_lease_s)
    if known is None:
        raise unknown_transaction(tx_id)
    check_token(settings, tenant, tx_id, who)
    command = ReleaseTransaction(
        message_id=release_id(tenant, tx_id, who.session_id),
        tenant=tenant,
        tx_id=tx_id,
        agent_id=who.agent_id,
        session_id=who.session_id,
        issued_at=datetime.now(UTC),
    )
    known.refuse_past_cap(command.type, who.agent_id, who.session_id, by_agent=True)
    fenced = rules.fence(known.owner, command.type, who.agent_id, who.session_id, by_agent=True)
    await produce_command(request.app.state, command, "the release")
    if fenced is not None:
        raise fenced_error(fenced)
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
    responses={**ok(ClaimAnswer, 202), **errors(401, 403, 404, 409, 413, 422, 429, 503)},
    openapi_extra=json_body(ReviewAsked),
)
async def ask_review(
    tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
) -> JSONResponse:
    """The owner asks for manual review of an operation that is `dispatched` or
    `unknown` (what a successor does rather than guess). `409 operation_not_in_flight`
    otherwise; `409 fenced` from a session that does not own the transaction."""
    settings: Settings = request.app.state.settings
    who = parsed(await request.body(), ReviewAsked)
    async with request.app.state.pool.acquire() as conn:
        store = TenantStore(conn, tenant)
        known = await known_transaction(store, tx_id, settings.owner_lease_s)
        # The operation's legs as the projector moved them, by the decider's own rules.
        op = await store.operation_of(tx_id, who.action) if known else None
    if known is None or op is None:
        raise unknown_transaction(tx_id)
    check_token(settings, tenant, tx_id, who)
    known.refuse_past_cap("RequestReview", who.agent_id, who.session_id, by_agent=True)
    fenced = rules.fence(known.owner, "RequestReview", who.agent_id, who.session_id, by_agent=True)
    if fenced is None and not op.forward.in_flight:
        raise ApiError(
            409,
            "operation_not_in_flight",
            f"{who.action!r} is {op.state}: only an operation in flight can be reviewed",
        )
    command = RequestReview(
        message_id=agent_review_id(op.op_key, op.forward.attempt, who.session_id),
        tenant=tenant,
        tx_id=tx_id,
        action=who.action,
        leg=Leg.FORWARD,
        attempt=op.forward.attempt,
        reason=f"requested_by_agent: {who.reason}",
        issued_at=datetime.now(UTC),
        agent_id=who.agent_id,
        session_id=who.session_id,
    )
    await produce_command(request.app.state, command, "the review request")
    if fenced is not None:
        raise fenced_error(fenced)
    return JSONResponse(
        {
            "tx_id": tx_id,
            "status": "review_requested",
            "agent_id": who.agent_id,
            "session_id": who.session_id,
        },
        status_code=202,
    )
