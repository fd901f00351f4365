"""The intake's busiest routes served past FastAPI's router (issue 24): a transaction's
submission and its provider's webhooks (three per transaction in the README's) are nearly
all of the intake's requests, and FastAPI's routing through every included router and its
per-request dependency solving cost each of them about as much CPU as verifying, reading
and producing a webhook.

This ASGI middleware sits inside every other one of the app's (the request span and its
metrics, the body limits, the console headers), where FastAPI's router would be. A POST
whose path one of the laned routes matches in full (the route's own `matches`, so a path
has one judge) is handed to the same endpoint function FastAPI would call, with the same
path parameters and the same dependency values (LANED says how each is obtained, and a
route whose dependencies are not the ones listed is left to FastAPI); a refusal raised is
answered by the exception handler the app registered for it (services.intake.app), so
status codes, bodies and headers stay docs/contract.md's. Everything else goes on to
FastAPI as before, including a laned path whose parameters FastAPI would refuse (a tenant
name outside TENANT_PATTERN: its 422 stays FastAPI's). The OpenAPI document still comes
from the FastAPI routes.
"""

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from services.intake import auth, transactions, webhooks
from services.intake.openapi import TENANT_PATTERN

log = logging.getLogger(__name__)

Handler = Callable[[Request, Exception], Awaitable[Response]]
Endpoint = Callable[..., Awaitable[Response]]

_TENANT = re.compile(TENANT_PATTERN)


@dataclass(frozen=True)
class Laned:
    """How the lane calls one endpoint: the dependencies its route declares (checked at
    start-up against the route's own), and the arguments they give it, from the request."""

    dependencies: tuple[Callable[..., Any], ...] = ()
    arguments: Callable[[Request], Awaitable[dict[str, Any]]] | None = None


async def _submitter(request: Request) -> dict[str, Any]:
    # auth.principal's own sub-dependency only declares the Bearer scheme in the OpenAPI
    # document and refuses nothing (auth._declare_bearer).
    return {"who": await auth.principal(request, None)}


LANED: dict[Endpoint, Laned] = {
    webhooks.receive: Laned(),
    webhooks.receive_own: Laned(),
    transactions.submit: Laned((auth.principal,), _submitter),
}


class Lane:
    def __init__(self, app: ASGIApp, host: FastAPI) -> None:
        self.app = app
        self._host = host
        self._routes: tuple[tuple[APIRoute, Laned], ...] = tuple(
            (route, LANED[route.endpoint])
            for router in (webhooks.router, transactions.router)
            for route in router.routes
            if isinstance(route, APIRoute)
            and route.endpoint in LANED
            and _declares(route, LANED[route.endpoint])
        )
        self._handlers: dict[type[BaseException], Handler] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            for route, laned in self._routes:
                match, child = route.matches(scope)
                if match is Match.FULL and _accepted(child["path_params"]):
                    scope.update(child)
                    await self._serve(route, laned, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(
        self, route: APIRoute, laned: Laned, scope: Scope, receive: Receive, send: Send
    ) -> None:
        request = Request(scope, receive)
        try:
            arguments = await laned.arguments(request) if laned.arguments is not None else {}
            response: Response = await route.endpoint(
                request=request, **scope["path_params"], **arguments
            )
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                raise  # as from FastAPI's router: ServerErrorMiddleware answers 500
            response = await handler(request, exc)
        await response(scope, receive, send)

    def _handler_for(self, exc: Exception) -> Handler | None:
        """The app's handler for `exc`, looked up as Starlette's ExceptionMiddleware does
        (the nearest class in its MRO); read once, after the app registered them all."""
        if self._handlers is None:
            self._handlers = _class_handlers(self._host.exception_handlers)
        for cls in type(exc).__mro__:
            found = self._handlers.get(cls)
            if found is not None:
                return found
        return None


def _declares(route: APIRoute, laned: Laned) -> bool:
    """Whether the lane supplies every argument of the route: its dependencies are the ones
    listed and it takes nothing from the query, headers, cookies or body but the request
    itself. A dependency or parameter added to a route later leaves that route to FastAPI
    rather than called without it."""
    dependant = route.dependant
    declared = tuple(dependency.call for dependency in dependant.dependencies)
    parsed = (
        dependant.query_params
        or dependant.header_params
        or dependant.cookie_params
        or dependant.body_params
    )
    if declared == laned.dependencies and not parsed:
        return True
    log.warning("%s is served by FastAPI: the lane does not supply its arguments", route.path)
    return False


def _accepted(params: Mapping[str, Any]) -> bool:
    """Whether the path parameters are ones FastAPI would accept as they are: a tenant
    outside the pattern is refused 422 by FastAPI's validation, so it goes there."""
    tenant = params.get("tenant")
    return tenant is None or _TENANT.fullmatch(tenant) is not None


def _class_handlers(handlers: Mapping[Any, Any]) -> dict[type[BaseException], Handler]:
    # 500 and Exception are ServerErrorMiddleware's, and status codes answer only the
    # HTTPException no laned endpoint raises: neither is the lane's to apply.
    return {
        key: value
        for key, value in handlers.items()
        if isinstance(key, type) and key is not Exception
    }
