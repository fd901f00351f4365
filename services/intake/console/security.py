"""The console's door: login with an operator key, the session cookie, CSRF, headers.

- Login takes an operator key in a POST form body (never a URL), checks it with the API's
  own rule (services.intake.auth.principal_for) and opens a session
  (services.intake.console.sessions). An agent key is refused: the console acts for a
  person, and an agent must not settle its own unknowns.
- The cookie is HttpOnly (no script reads it), SameSite=Strict (no other site's page sends
  it), Path=/console, and Secure when the request came over https.
- Every form carries the session's CSRF token; a POST without the right one is refused 403
  and changes nothing (SameSite alone is not relied on: an older browser ignores it).
- Every console answer carries a Content-Security-Policy that allows this origin's scripts
  and styles only: no inline script, no eval, so markup smuggled past escaping still
  could not run.
"""

from __future__ import annotations

import hmac
import logging
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.intake.auth import principal_for
from services.intake.console.render import page
from services.intake.console.sessions import (
    SESSION_TTL_S,
    ConsoleUser,
    close_session,
    open_session,
    session_of,
)
from services.intake.errors import ApiError

log = logging.getLogger("recon.console")
router = APIRouter(include_in_schema=False)

COOKIE = "recon_console"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
# Forms are small: a note, a reason, a few ids.
MAX_FORM_BYTES = 16 * 1024


class LoginNeeded(Exception):
    """No valid session: the page answers with the login page instead."""


async def form(request: Request) -> dict[str, str]:
    """The posted form (application/x-www-form-urlencoded), one value per field."""
    raw = await request.body()
    if len(raw) > MAX_FORM_BYTES:
        raise ApiError(413, "payload_too_large", "the form is larger than the console takes")
    fields = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in fields.items()}


async def console_user(request: Request) -> ConsoleUser:
    """FastAPI dependency of every console page and action: the session's person."""
    token = request.cookies.get(COOKIE)
    if not token:
        raise LoginNeeded
    async with request.app.state.pool.acquire() as conn:
        user = await session_of(conn, token)
    if user is None:
        raise LoginNeeded
    return user


async def checked_form(
    request: Request, user: Annotated[ConsoleUser, Depends(console_user)]
) -> dict[str, str]:
    """The posted form of a session whose CSRF token it carries; 403 otherwise."""
    fields = await form(request)
    if not hmac.compare_digest(fields.get("csrf", "").encode(), user.csrf.encode()):
        log.warning(
            "console: %s of %s sent a form without its CSRF token", user.person, user.tenant
        )
        raise ApiError(403, "csrf", "this form is stale or was not sent by the console: reload")
    return fields


@router.get("/console/login", response_class=HTMLResponse)
async def login_page(request: Request) -> HTMLResponse:
    return page("login.html", None, error=None)


@router.post("/console/login", response_model=None)
async def login(request: Request) -> Response:
    key = (await form(request)).get("key", "").strip()
    settings = request.app.state.settings
    try:
        who = principal_for(f"Bearer {key}", settings.api_keys, settings.operator_keys)
    except ApiError:
        return page("login.html", None, 401, error="That key is not known.")
    if who.operator is None:
        # An agent key: the console is for people (docs/contract.md, "Roles").
        return page("login.html", None, 403, error="Only an operator key opens the console.")
    async with request.app.state.pool.acquire() as conn:
        token = await open_session(conn, who.tenant, who.operator)
    log.info("console: %s of %s logged in", who.operator, who.tenant)
    answer = RedirectResponse("/console", status_code=303)
    answer.set_cookie(
        COOKIE,
        token,
        max_age=SESSION_TTL_S,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return answer


@router.post("/console/logout", response_model=None)
async def logout(
    request: Request,
    user: Annotated[ConsoleUser, Depends(console_user)],
    fields: Annotated[dict[str, str], Depends(checked_form)],
) -> Response:
    async with request.app.state.pool.acquire() as conn:
        await close_session(conn, request.cookies.get(COOKIE, ""))
    log.info("console: %s of %s logged out", user.person, user.tenant)
    answer = RedirectResponse("/console/login", status_code=303)
    answer.delete_cookie(COOKIE, path="/console")
    return answer


_HEADER_PAIRS = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in HEADERS.items()]
_HEADER_NAMES = {name for name, _ in _HEADER_PAIRS}


class ConsoleHeaders:
    """Sets HEADERS on every `/console` answer, replacing any a page set itself.

    A plain ASGI wrapper, not `@app.middleware("http")`: Starlette's BaseHTTPMiddleware
    runs every request, `/v1` ones included, through an anyio task group and a memory
    stream, which cost the intake more CPU per request than most routes' own work."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith("/console"):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [
                    (k, v) for k, v in message.get("headers", ()) if k.lower() not in _HEADER_NAMES
                ]
                message = {**message, "headers": kept + _HEADER_PAIRS}
            await send(message)

        await self.app(scope, receive, with_headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(LoginNeeded)
    async def to_login(request: Request, exc: LoginNeeded) -> Response:
        if request.headers.get("hx-request"):
            # A refresh by htmx: the whole window goes to the login page, not the panel.
            return Response(status_code=401, headers={"HX-Redirect": "/console/login"})
        return RedirectResponse("/console/login", status_code=303)

    app.add_middleware(ConsoleHeaders)
