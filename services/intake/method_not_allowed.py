"""`405 Method Not Allowed` with an `Allow` header listing every method of the path.

Starlette answers 405 from the first route whose path matches, so a path served by two
routes (`GET` and `PUT /v1/policy`, `GET` and `POST /v1/kill-switches`) would list only
that route's methods. RFC 9110 asks for all of them, and generated clients and the fuzz
test read the header.
"""

from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match, Route


def _routes(routes: Iterable[BaseRoute]) -> Iterator[Route]:
    """Every route, including those of routers included (without a prefix, as the intake
    includes them all) into the app."""
    for route in routes:
        if isinstance(route, Route):
            yield route
            continue
        inner: Any = getattr(route, "original_router", route)
        yield from _routes(getattr(inner, "routes", ()))


def install(app: FastAPI) -> None:
    @app.exception_handler(405)
    async def method_not_allowed(request: Request, exc: HTTPException) -> JSONResponse:
        methods: set[str] = set()
        for route in _routes(app.router.routes):
            if route.methods:
                match, _ = route.matches(request.scope)
                if match is not Match.NONE:
                    methods |= route.methods
        return JSONResponse(
            {"detail": exc.detail},
            status_code=405,
            headers={"Allow": ", ".join(sorted(methods))},
        )
