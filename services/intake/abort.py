"""`POST /v1/transactions/{tx_id}/abort` (docs/contract.md).

The intake turns the request into an AbortTransaction command; the decider judges it
against the transaction as it is in the log: before commit it stops further dispatch, lets
in-flight steps settle and fails the transaction, and the saga orchestrator then undoes the
confirmed steps; once compensation has started, or after commit, it records CommandIgnored.
Before producing it, the intake records the abort on the intent row
(services.intake.abort_record), so that a step dispatched before the decider read the
abort (the first one is dispatched in the decision that accepts the transaction) is not
called if no dispatcher has begun its call yet.

The 409 for a committed transaction is answered from the projection, which may lag the log
by a moment: an abort that races the commit is answered 202 and ignored by the decider, so
the answer can be optimistic but the outcome is always the log's.
"""

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from events.definition import TxStatus
from events.inputs import AbortTransaction
from events.keys import abort_id, session_abort_id
from services.config import Settings
from services.intake import auth, owner_token, ownership
from services.intake.abort_record import record_abort
from services.intake.errors import ApiError, unknown_transaction
from services.intake.openapi import TxId, errors, json_body, ok
from services.intake.produce import produce_command, storable
from services.intake.response_models import AbortRequested
from services.intake.submission import SESSION_PATTERN
from services.intake.tenant_store import TenantStore
from transactions import ownership as rules

router = APIRouter()


class AbortRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: Annotated[str, Field(min_length=1, max_length=1000)] = "aborted by request"
    actor: Annotated[str, Field(min_length=1, max_length=128)] = "agent"
    # The asking agent's session and the owner token its submission or claim returned:
    # required from an agent key (issue 18, item 5); an operator key may omit them. A
    # session that no longer owns the transaction is fenced, `409 fenced`, and recorded.
    agent_id: Annotated[str | None, Field(min_length=1, max_length=128)] = None
    session_id: Annotated[str | None, Field(pattern=SESSION_PATTERN)] = None
    owner_token: Annotated[str | None, Field(min_length=1, max_length=128)] = None


@router.post(
    "/v1/transactions/{tx_id}/abort",
    status_code=202,
    responses={**ok(AbortRequested, 202), **errors(401, 403, 404, 409, 413, 422, 429, 503)},
    # Optional for an operator: an empty body is the default reason and actor.
    openapi_extra=json_body(AbortRequest, required=False),
)
async def abort(
    tx_id: TxId, request: Request, who: Annotated[auth.Principal, Depends(auth.principal)]
) -> JSONResponse:
    # Parsed here, after authentication, so nothing about the body is revealed to a
    # caller without a key (the same order as submissions).
    settings: Settings = request.app.state.settings
    tenant = who.tenant
    body = _parse(await request.body())
    who.speak_for(body.agent_id)
    async with request.app.state.pool.acquire() as conn:
        store = TenantStore(conn, tenant)
        found = await store.transaction(tx_id)
        known = await ownership.known_transaction(store, tx_id, settings.owner_lease_s)
    if found is None:
        raise unknown_transaction(tx_id)
    owner = known.owner if known else None
    if found["status"] == TxStatus.COMMITTED.value:
        raise ApiError(
            409,
            "already_committed",
            f"transaction {tx_id!r} is committed; an abort is only possible before commit. "
            "Undo its effects with a new transaction (a refund, a release) instead",
        )
    by_agent = not who.is_operator
    if owner is not None and by_agent and body.session_id is not None:
        if body.agent_id is None:
            raise ApiError(
                403,
                "session_required",
                "an agent's abort that names a session_id must name its agent_id and"
                " owner_token too",
            )
        owner_token.check(
            settings.owner_token_secret,
            tenant,
            tx_id,
            body.agent_id,
            body.session_id,
            body.owner_token,
        )
    command = AbortTransaction(
        # Deterministic, like every command: a retried request is the same command. An
        # abort is a one-way switch, so a second abort (whoever asks) adds nothing.
        message_id=session_abort_id(tenant, tx_id, body.session_id)
        if body.session_id
        else abort_id(tenant, tx_id),
        tenant=tenant,
        tx_id=tx_id,
        actor=body.actor,
        reason=body.reason,
        issued_at=datetime.now(UTC),
        agent_id=body.agent_id,
        session_id=body.session_id,
        operator=who.operator,
    )
    fenced = rules.fence(owner, command.type, body.agent_id, body.session_id, by_agent=by_agent)
    if fenced is not None and fenced.reason == "session_required":
        # Nothing is produced for a refused request: the decider would refuse it too.
        raise ApiError(
            403,
            "session_required",
            f"{fenced.rule}: name agent_id, session_id and owner_token in the abort's body",
        )
    if known is not None:
        known.refuse_past_cap(command.type, body.agent_id, body.session_id, by_agent=by_agent)
    if fenced is None:
        # Before the produce: a step whose call is not begun yet is stopped even if the
        # command is slow to reach the decider (services.intake.abort_record). A fenced
        # session's abort is refused on the log, so it must not stop anything here. A
        # command produce_command would refuse (422) stops nothing either.
        storable(command)
        async with request.app.state.pool.acquire() as conn:
            await record_abort(TenantStore(conn, tenant), tx_id)
    await produce_command(request.app.state, command, "the abort")
    if fenced is not None:
        # Produced all the same: the decider records the refusal on the chain.
        raise ApiError(409, "fenced", f"{fenced.rule}; the command was refused and recorded")
    return JSONResponse({"tx_id": tx_id, "status": "abort_requested"}, status_code=202)


def _parse(raw: bytes) -> AbortRequest:
    if not raw.strip():
        return AbortRequest()
    try:
        return AbortRequest.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
            if error["loc"]
            else error["msg"]
            for error in exc.errors()
        )
        raise ApiError(
            422,
            "invalid_request",
            f'{problems}; the body is optional, else {{"reason": "...", "actor": "..."}}',
        ) from None
