"""Routes of the sandbox's stateful side (domain.py): previews of every operation, and the
waitlists and records tests and demos set up and read back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.devtools.sandbox import domain
from services.devtools.sandbox.catalog import Operation, Refusal
from services.devtools.sandbox.responses import describe_validation, error_response
from services.devtools.sandbox.store import SandboxStore


class WaitlistSeed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resource: str = Field(min_length=1)
    users: list[str]
    revision: int = 1


class RecordSeed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resource: str = Field(min_length=1)
    data: Any = None
    revision: int = 1


async def _json_object(request: Request) -> dict[str, Any] | None:
    try:
        body = json.loads(await request.body())
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def domain_routes(store: SandboxStore) -> APIRouter:
    router = APIRouter()

    def previewer(operation: Operation) -> Callable[[Request], Awaitable[Response]]:
        async def preview(request: Request) -> Response:
            """What this call would do now, computed from the provider's state; no effect,
            no idempotency record. A definitive refusal (a stale revision) answers as the
            call itself would."""
            body = await _json_object(request)
            if body is None:
                return error_response(400, "invalid_body", "The body must be a JSON object.")
            body.pop("metadata", None)
            found = await asyncio.to_thread(store.preview, operation, body)
            if isinstance(found, Refusal):
                return error_response(found.status_code, found.error, found.message)
            return JSONResponse({"operation": operation.value, **found})

        preview.__name__ = operation.value.replace(".", "_") + "_preview"
        return preview

    for operation in Operation:
        router.add_api_route(
            operation.path + "/preview",
            previewer(operation),
            methods=["POST"],
            summary=f"Preview {operation.value}: its effect from the current state, not applied",
        )

    def seeder(
        model: type[WaitlistSeed] | type[RecordSeed],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def seed(request: Request) -> Response:
            body = await _json_object(request)
            try:
                spec = model.model_validate(body)
            except ValidationError as exc:
                return error_response(422, "invalid_seed", describe_validation(exc))

            def write() -> None:
                with store.transaction() as db:
                    if isinstance(spec, WaitlistSeed):
                        domain.seed_waitlist(db, spec.resource, spec.users, spec.revision)
                    else:
                        domain.seed_record(db, spec.resource, spec.data, spec.revision)

            await asyncio.to_thread(write)
            return JSONResponse({"resource": spec.resource, "revision": spec.revision}, 201)

        return seed

    router.add_api_route("/v1/waitlists", seeder(WaitlistSeed), methods=["POST"])
    router.add_api_route("/v1/records", seeder(RecordSeed), methods=["POST"])

    def reader(
        read: Callable[[Any, str], dict[str, Any] | None],
    ) -> Callable[[str], Awaitable[Response]]:
        async def show(resource: str) -> Response:
            def get() -> dict[str, Any] | None:
                with store.reading() as db:
                    return read(db, resource)

            found = await asyncio.to_thread(get)
            if found is None:
                return error_response(404, "not_found", f"No resource {resource!r}.")
            return JSONResponse(found)

        return show

    router.add_api_route("/v1/waitlists/{resource}", reader(domain.read_waitlist), methods=["GET"])
    router.add_api_route("/v1/records/{resource}", reader(domain.read_record), methods=["GET"])
    return router
