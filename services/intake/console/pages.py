"""What a person reads in the console. Every read is the tenant's own: the session names
the tenant, and every query goes through the TenantStore bound to it (or an API route
handed the session's principal), so another tenant's review, transaction or switch is
"not found" here exactly as in the API.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from events.definition import Resolution, TxStatus
from events.envelope import Envelope, verify_chain
from services.intake import drift, kill_switches, policy, transactions
from services.intake.approvals import preview_steps
from services.intake.auth import Principal
from services.intake.console import effects
from services.intake.console.kafka_counts import KafkaCounts
from services.intake.console.render import page
from services.intake.console.security import console_user
from services.intake.console.sessions import ConsoleUser
from services.intake.errors import ApiError
from services.intake.preview_store import latest_preview
from services.intake.tenant_store import TenantStore

router = APIRouter(include_in_schema=False)
User = Annotated[ConsoleUser, Depends(console_user)]

# The console shows what needs a person now; an incident with more than this many open
# reviews is read through the paged API or page by page.
SHOWN = 100


def principal(user: ConsoleUser) -> Principal:
    """The session as the API's principal: its tenant, and the person as the operator."""
    return Principal(user.tenant, operator=user.person)


@router.get("/console", response_class=HTMLResponse)
async def needs_a_person(request: Request, user: User) -> HTMLResponse:
    async with request.app.state.pool.acquire() as conn:
        store = TenantStore(conn, user.tenant)
        reviews = await store.reviews(state="open", created_before=None, limit=SHOWN)
        waiting = await store.transactions(status=TxStatus.AWAITING_APPROVAL.value, limit=SHOWN)
    approvals = [
        {"tx_id": row["tx_id"], "agent_id": row["agent_id"], "action": step["action"],
         "operation": step["operation"], "created_at": row["created_at"]}
        for row in waiting
        for step in json.loads(row["operations"])
        if step["state"] == "awaiting_approval"
    ]  # fmt: skip
    return page("needs.html", user, reviews=reviews, approvals=approvals)


@router.get("/console/counts", response_class=HTMLResponse)
async def counts(request: Request, user: User) -> HTMLResponse:
    """The panel every page refreshes on its own (htmx polling)."""
    async with request.app.state.pool.acquire() as conn:
        attention = await TenantStore(conn, user.tenant).attention()
    kafka = await _kafka_counts(request).counts()
    return page("counts.html", user, attention=attention, kafka=kafka)


def _kafka_counts(request: Request) -> KafkaCounts:
    state = request.app.state
    if getattr(state, "console_kafka", None) is None:
        state.console_kafka = KafkaCounts(state.settings, state.admin)
    found: KafkaCounts = state.console_kafka
    return found


@router.get("/console/reviews/{review_id}", response_class=HTMLResponse)
async def review(request: Request, user: User, review_id: str) -> HTMLResponse:
    async with request.app.state.pool.acquire() as conn:
        row = await TenantStore(conn, user.tenant).review(review_id)
    if row is None:
        return page("missing.html", user, 404, what=f"review {review_id}")
    choices = [(r.value, effects.resolution_effect(row["leg"], r)) for r in Resolution]
    evidence = json.loads(row["evidence"]) if row["evidence"] else []
    return page("review.html", user, review=row, evidence=evidence, choices=choices)


@router.get("/console/approvals/{tx_id}/{action}", response_class=HTMLResponse)
async def approval(request: Request, user: User, tx_id: str, action: str) -> HTMLResponse:
    async with request.app.state.pool.acquire() as conn:
        store = TenantStore(conn, user.tenant)
        # The page needs the proposal's digest and the step, not the decider's whole fold
        # of the chain, which an agent can grow to its cap (docs/benchmark.md, "An
        # operator's request and its transaction's chain"): the accepted event's digest
        # and the projected step. Judging the approval is the decider's, on POST.
        digest = await store.proposal_digest(tx_id)
        preview = None if digest is None else await latest_preview(store, digest)
        tx = await store.transaction(tx_id)
    step = next((op for op in tx["operations"] if op["action"] == action), None) if tx else None
    if digest is None or step is None:
        return page("missing.html", user, 404, what=f"step {action} of {tx_id}")
    return page(
        "approval.html",
        user,
        tx=tx,
        step=step,
        preview=preview,
        shown=preview_steps(preview),
        approve_effect=effects.APPROVE_EFFECT,
        reject_effect=effects.REJECT_EFFECT,
    )


@router.get("/console/transactions", response_class=HTMLResponse)
async def transaction_list(request: Request, user: User) -> HTMLResponse:
    asked = {k: v for k, v in request.query_params.items() if v}
    status = asked.get("status")
    try:
        listed = await transactions.list_transactions(
            request,
            tenant=user.tenant,
            status=TxStatus(status) if status else None,
            agent_id=asked.get("agent_id"),
            provider=asked.get("provider"),
            operation=asked.get("operation"),
            created_after=None,
            created_before=None,
            limit=50,
            cursor=asked.get("cursor"),
        )
    except (ApiError, ValueError) as refused:
        message = refused.message if isinstance(refused, ApiError) else "unknown status"
        return page("transactions.html", user, 422, listed=None, asked=asked, error=message,
                    statuses=list(TxStatus))  # fmt: skip
    following = {k: v for k, v in asked.items() if k != "cursor"}
    return page("transactions.html", user, listed=listed, asked=following, error=None,
                statuses=list(TxStatus))  # fmt: skip


@router.get("/console/transactions/{tx_id}", response_class=HTMLResponse)
async def transaction(request: Request, user: User, tx_id: str) -> HTMLResponse:
    async with request.app.state.pool.acquire() as conn:
        store = TenantStore(conn, user.tenant)
        tx = await store.transaction(tx_id)
        events = await store.events(tx_id) or []
    if tx is None:
        return page("missing.html", user, 404, what=f"transaction {tx_id}")
    # The chain checked here, from the events as projected (events.envelope.verify_chain).
    problems = verify_chain([Envelope.model_validate(e) for e in events])
    return page("transaction.html", user, tx=tx, events=events, problems=problems)


@router.get("/console/controls", response_class=HTMLResponse)
async def controls(request: Request, user: User) -> HTMLResponse:
    switches = await kill_switches.list_switches(request, tenant=user.tenant)
    quotas = await policy.get_quotas(request, tenant=user.tenant)
    # The API's own view and redaction of the drift that belongs to no tenant.
    found: dict[str, Any] = await drift.list_drift(
        request, who=principal(user), limit=SHOWN, cursor=None
    )
    return page(
        "controls.html",
        user,
        switches=switches["kill_switches"],
        quotas=quotas["quotas"],
        drift=found["drift"],
        engage_effect=effects.ENGAGE_EFFECT,
        release_effect=effects.RELEASE_EFFECT,
        reset_effect=effects.RESET_EFFECT,
    )
