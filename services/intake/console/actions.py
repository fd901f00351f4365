"""What a person does in the console. Each action is the API route that does it for a
client (services.intake.reviews, approvals, kill_switches, policy), called with the
session's principal and the form turned into the route's JSON body: the same rules, the
same refusals, the same records, and no second copy of any of them here.

Every action needs the session's CSRF token (services.intake.console.security) and logs
one line naming the person, the tenant and what was done; a refusal is shown to the person
with the API's own message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from starlette.types import Message

from events.definition import Resolution
from services.intake import approvals, kill_switches, policy, reviews
from services.intake.console import effects
from services.intake.console.pages import User, principal
from services.intake.console.render import page
from services.intake.console.security import checked_form
from services.intake.console.sessions import ConsoleUser
from services.intake.errors import ApiError
from services.intake.tenant_store import TenantStore

log = logging.getLogger("recon.console")
router = APIRouter(include_in_schema=False)
Form = Annotated[dict[str, str], Depends(checked_form)]


def as_json(request: Request, body: dict[str, Any]) -> Request:
    """The request the API route reads: this one's app and client, the form as JSON."""
    raw = json.dumps(body).encode()

    async def receive() -> Message:
        return {"type": "http.request", "body": raw, "more_body": False}

    scope = {**request.scope, "headers": [(b"content-type", b"application/json")]}
    return Request(scope, receive)


async def _act(user: ConsoleUser, what: str, done: Awaitable[Any], then: str) -> Response:
    """Run the API route; log who did what; go to `then`, or show the refusal."""
    try:
        await done
    except ApiError as refused:
        log.info("console: %s of %s was refused %s: %s", user.person, user.tenant, what,
                 refused.code)  # fmt: skip
        return page("refused.html", user, refused.status, what=what, refused=refused, back=then)
    log.info("console: %s of %s %s", user.person, user.tenant, what)
    return RedirectResponse(then, status_code=303)


def _resolution(fields: dict[str, str]) -> Resolution | None:
    try:
        return Resolution(fields.get("resolution", ""))
    except ValueError:
        return None


@router.post("/console/reviews/{review_id}/confirm", response_model=None)
async def confirm_resolution(
    request: Request, user: User, fields: Form, review_id: str
) -> Response:
    """The confirmation that names the effect, before anything is sent."""
    resolution = _resolution(fields)
    async with request.app.state.pool.acquire() as conn:
        row = await TenantStore(conn, user.tenant).review(review_id)
    if row is None:
        return page("missing.html", user, 404, what=f"review {review_id}")
    if resolution is None:
        return page("refused.html", user, 422, what=f"resolving review {review_id}",
                    refused=ApiError(422, "invalid_request", "choose a resolution"),
                    back=f"/console/reviews/{review_id}")  # fmt: skip
    effect = effects.resolution_effect(row["leg"], resolution)
    return page("confirm.html", user, review=row, resolution=resolution.value, effect=effect,
                note=fields.get("note", ""))  # fmt: skip


@router.post("/console/reviews/{review_id}/resolve", response_model=None)
async def resolve(request: Request, user: User, fields: Form, review_id: str) -> Response:
    body = {"resolution": fields.get("resolution", ""), "note": fields.get("note", "")}
    what = f"resolved review {review_id} as {body['resolution']}"
    call = reviews.resolve_review(review_id, as_json(request, body), principal(user))
    return await _act(user, what, call, f"/console/reviews/{review_id}")


@router.post("/console/approvals/approve", response_model=None)
async def approve(request: Request, user: User, fields: Form) -> Response:
    tx_id, action = fields.get("tx_id", ""), fields.get("action", "")
    body = {"tx_id": tx_id, "action": action, "digest": fields.get("digest", "")}
    what = f"approved step {action} of {tx_id} (preview {body['digest']})"
    call = approvals.approve(as_json(request, body), principal(user))
    return await _act(user, what, call, f"/console/transactions/{tx_id}")


@router.post("/console/approvals/reject", response_model=None)
async def reject(request: Request, user: User, fields: Form) -> Response:
    op_key, tx_id = fields.get("op_key", ""), fields.get("tx_id", "")
    what = f"rejected step {fields.get('action', '')} of {tx_id} ({op_key})"
    call = approvals.reject(op_key, as_json(request, {"note": fields.get("note", "")}),
                            principal(user))  # fmt: skip
    return await _act(user, what, call, f"/console/transactions/{tx_id}")


@router.post("/console/kill-switches", response_model=None)
async def engage(request: Request, user: User, fields: Form) -> Response:
    scope = {k: fields[k] for k in ("agent_id", "provider", "operation") if fields.get(k)}
    body = {"scope": scope, "reason": fields.get("reason", "")}
    what = f"engaged a kill switch on {scope or 'the whole tenant'}"
    call = kill_switches.engage(as_json(request, body), principal(user))
    return await _act(user, what, call, "/console/controls")


@router.post("/console/kill-switches/{switch_id}/release", response_model=None)
async def release(request: Request, user: User, fields: Form, switch_id: str) -> Response:
    call = kill_switches.release(switch_id, request, principal(user))
    return await _act(user, f"released kill switch {switch_id}", call, "/console/controls")


@router.post("/console/breakers/reset", response_model=None)
async def reset_breaker(request: Request, user: User, fields: Form) -> Response:
    body = {"agent_id": fields.get("agent_id", ""), "operation": fields.get("operation", "")}
    what = f"reset the breaker of {body['agent_id']} on {body['operation']}"
    call = policy.reset_breaker(as_json(request, body), principal(user))
    return await _act(user, what, call, "/console/controls")
