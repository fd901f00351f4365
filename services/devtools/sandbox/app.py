"""HTTP routes of the sandbox provider.

Faults wrap the storage call: `*_before_commit` and `delay` act before it, `*_after_commit`
after it, so "after commit" really means the effect and its idempotency record are durable
before the client is let down.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from services.devtools.sandbox.call_log import (
    APPLY_OUTCOMES,
    RECEIVED_AT,
    CallKind,
    CallLog,
    CallOutcome,
)
from services.devtools.sandbox.catalog import Operation
from services.devtools.sandbox.dashboard import dashboard_routes
from services.devtools.sandbox.domain_routes import domain_routes
from services.devtools.sandbox.faults import FaultBoard, FaultMode, FaultSpec
from services.devtools.sandbox.outbound import WebhookSender
from services.devtools.sandbox.pages import MAX_PAGE
from services.devtools.sandbox.responses import describe_validation, error_response
from services.devtools.sandbox.store import Outcome, SandboxStore, Submission
from services.devtools.sandbox.unrecorded import UnrecordedEffect
from services.devtools.sandbox.webhook_outbox import WebhookOutbox
from services.devtools.sandbox.webhook_routes import webhook_routes

IDEMPOTENCY_HEADER = "Idempotency-Key"
# How long a `lose_response_after_commit` request is held open if the client never gives up;
# far beyond any sane client timeout.
LOST_RESPONSE_HOLD_S = 3600.0
_DISCONNECT_POLL_S = 0.05


async def _read_json_object(request: Request) -> dict[str, Any] | JSONResponse:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError:
        return error_response(400, "invalid_json", "The request body must be a JSON object.")
    if not isinstance(body, dict):
        return error_response(
            400,
            "invalid_body",
            f"The request body must be a JSON object, not {type(body).__name__}.",
        )
    return body


async def _hold_until_client_gives_up(request: Request) -> None:
    """Keep the connection open, answering nothing, until the client hangs up.

    Waits on the event loop (never a thread or a lock), so other requests go on normally.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOST_RESPONSE_HOLD_S
    while loop.time() < deadline:
        if await request.is_disconnected():
            return
        await asyncio.sleep(_DISCONNECT_POLL_S)


def page_limit(limit: str | None) -> int | Response:
    """The one rule for a page's size, for every paged list (`GET /v1/effects`,
    `GET /v1/calls`): a whole number from 1 to MAX_PAGE, else a 400 that says so."""
    if limit is not None and limit.isascii() and limit.isdigit() and len(limit) <= 3:
        if 1 <= int(limit) <= MAX_PAGE:
            return int(limit)
    return error_response(
        400, "invalid_limit", f"limit must be a whole number from 1 to {MAX_PAGE} when paging."
    )


# An ISO 8601 instant with its zone is 32 characters at most (microseconds, `+hh:mm`).
MAX_INSTANT_CHARS = 40


def instant_param(name: str, raw: str | None) -> datetime | None:
    """A listing's time filter (`created_gte`, `created_lt`): None when not sent, else the
    instant; a ValueError naming the parameter when it is not an ISO 8601 instant naming
    its zone (a naive time would fall either side of the effects' UTC times) or is longer
    than any is."""
    if raw is None:
        return None
    at = None
    if len(raw) <= MAX_INSTANT_CHARS:
        try:
            at = datetime.fromisoformat(raw)
        except ValueError:
            at = None
    if at is None or at.tzinfo is None:
        raise ValueError(name)
    return at


def call_seq(cursor: str) -> int | None:
    """A call's `seq` sent back as `starting_after`: a whole number that fits SQLite's
    integers (18 digits), else None."""
    if cursor.isascii() and cursor.isdigit() and len(cursor) <= 18:
        return int(cursor)
    return None


def create_app(
    store: SandboxStore,
    faults: FaultBoard | None = None,
    webhooks: WebhookSender | None = None,
) -> FastAPI:
    """The sandbox's routes. `webhooks` is None when no webhook URL is configured; the store
    must then have been built with the outbox's `on_record` hook for deliveries to exist."""
    board = faults if faults is not None else FaultBoard()
    calls = CallLog(store)

    async def log_call(
        kind: CallKind,
        operation: Operation | None,
        key: str,
        outcome: CallOutcome,
        traceparent: str | None = None,
    ) -> None:
        name = None if operation is None else operation.value
        await asyncio.to_thread(
            calls.record, kind, name, key, outcome, traceparent, RECEIVED_AT.get()
        )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if webhooks is not None:
            await webhooks.start()
        try:
            yield
        finally:
            # Stop sending before the store closes under the sender's feet.
            if webhooks is not None:
                await webhooks.stop()
            store.close()

    def announce(result: Submission) -> None:
        if webhooks is not None and result.outcome is Outcome.RECORDED and result.effect:
            webhooks.on_effect_recorded(result.effect)

    app = FastAPI(
        title="recon sandbox provider",
        description="A stand-in for payment, inventory and email providers. See docs/contract.md.",
        lifespan=lifespan,
    )

    def operation_handler(operation: Operation) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            RECEIVED_AT.set(store.clock())
            key = request.headers.get(IDEMPOTENCY_HEADER, "").strip()
            if not key:
                return error_response(
                    400,
                    "missing_idempotency_key",
                    f"The {IDEMPOTENCY_HEADER} header is required on {operation.value}; send "
                    "one stable key per intended effect and reuse it on every retry.",
                )
            body = await _read_json_object(request)
            if isinstance(body, JSONResponse):
                return body
            metadata = body.pop("metadata", {})
            if not isinstance(metadata, dict):
                return error_response(400, "invalid_metadata", "'metadata' must be a JSON object.")

            # Consumed only by well-formed calls: a malformed request would not reach the
            # provider's effect path either.
            fault = board.take_call_fault(operation)
            mode = fault.mode if fault is not None else None
            if mode is FaultMode.ERROR_500_BEFORE_COMMIT:
                await log_call(CallKind.APPLY, operation, key, CallOutcome.FAILED)
                return error_response(
                    500, "internal_error", "Injected fault: failed before commit; nothing done."
                )
            if mode is FaultMode.DELAY and fault is not None:
                await asyncio.sleep(fault.delay_ms / 1000)
            pending_ms = fault.delay_ms if mode is FaultMode.PENDING and fault else None

            result = await asyncio.to_thread(
                store.submit, operation, key, body, metadata, pending_ms=pending_ms
            )
            announce(result)
            await log_call(
                CallKind.APPLY,
                operation,
                key,
                APPLY_OUTCOMES[result.outcome],
                request.headers.get("traceparent"),
            )

            if mode is FaultMode.ERROR_500_AFTER_COMMIT:
                return error_response(
                    500, "internal_error", "Injected fault: failed after commit; the effect stands."
                )
            if mode is FaultMode.LOSE_RESPONSE_AFTER_COMMIT:
                await _hold_until_client_gives_up(request)
                # Nobody is listening any more; this goes nowhere.
                return Response(status_code=504)
            return JSONResponse(result.body, status_code=result.status_code)

        handle.__name__ = operation.value.replace(".", "_")
        return handle

    for operation in Operation:
        app.add_api_route(
            operation.path,
            operation_handler(operation),
            methods=["POST"],
            summary=f"Perform {operation.value} under an Idempotency-Key",
        )

    @app.get("/v1/effects")
    async def effects(
        idempotency_key: str | None = None,
        operation: str | None = None,
        created_gte: str | None = None,
        created_lt: str | None = None,
        limit: str | None = None,
        starting_after: str | None = None,
    ) -> Response:
        RECEIVED_AT.set(store.clock())
        op: Operation | None = None
        if operation is not None:
            try:
                op = Operation(operation)
            except ValueError:
                known = ", ".join(o.value for o in Operation)
                return error_response(
                    400,
                    "unknown_operation",
                    f"Unknown operation {operation!r}; use one of {known}.",
                )
        paged = (limit, created_gte, created_lt, starting_after)
        if idempotency_key is None and paged != (None,) * 4:
            return await _effects_page(op, created_gte, created_lt, limit, starting_after)
        if idempotency_key is None:
            listed = await asyncio.to_thread(store.list_effects, op)
            return JSONResponse({"effects": [e.to_json() for e in listed]})

        found, key_operation = await asyncio.to_thread(store.lookup, idempotency_key)
        if board.take_lookup_fault(key_operation) is not None:
            await log_call(CallKind.LOOKUP, key_operation, idempotency_key, CallOutcome.UNAVAILABLE)
            return error_response(
                503,
                "lookup_unavailable",
                "Injected fault: lookups are unavailable; absence is not proven, retry later.",
            )
        shown = [e.to_json() for e in found if op is None or e.operation is op]
        seen = CallOutcome.FOUND if shown else CallOutcome.ABSENT
        await log_call(CallKind.LOOKUP, key_operation, idempotency_key, seen)
        return JSONResponse({"effects": shown})

    async def _effects_page(
        op: Operation | None,
        created_gte: str | None,
        created_lt: str | None,
        raw_limit: str | None,
        after: str | None,
    ) -> Response:
        """The list as Stripe's lists page (newest first, `has_more`, `starting_after`),
        from `created_gte` on and before `created_lt`: what the drift scan reads for its
        window, or for a hole below a cut listing, in pages that stay under recon's answer
        bound however long the history."""
        limit = page_limit(raw_limit)
        if isinstance(limit, Response):
            return limit
        try:
            since = instant_param("created_gte", created_gte)
            until = instant_param("created_lt", created_lt)
        except ValueError as error:
            return error_response(
                400, f"invalid_{error}", f"{error} must be an ISO 8601 instant with its zone."
            )
        page, more = await asyncio.to_thread(store.effects_page, op, since, limit, after, until)
        return JSONResponse({"effects": [e.to_json() for e in page], "has_more": more})

    @app.get("/v1/calls")
    async def list_calls(
        idempotency_key: str | None = None,
        operation: str | None = None,
        limit: str | None = None,
        starting_after: str | None = None,
    ) -> Response:
        """Sandbox-only: every apply and lookup the provider answered, in arrival order
        (see call_log.py): what proves a key was applied once, or looked up before a retry.
        Without `limit` every call in one body, as before pages; with it, pages in the
        same arrival order (docs/sandbox.md), after the call numbered `starting_after`."""
        if (limit, starting_after) == (None, None):
            listed = await asyncio.to_thread(calls.find, idempotency_key, operation)
            return JSONResponse({"calls": [c.to_json() for c in listed]})
        size = page_limit(limit)
        if isinstance(size, Response):
            return size
        after: int | None = None
        if starting_after is not None:
            after = call_seq(starting_after)
            if after is None:
                return error_response(
                    400,
                    "invalid_starting_after",
                    "starting_after must be the seq of a listed call (a whole number).",
                )
        page, more = await asyncio.to_thread(calls.page, idempotency_key, operation, size, after)
        return JSONResponse({"calls": [c.to_json() for c in page], "has_more": more})

    @app.post("/v1/effects/unrecorded")
    async def record_unrecorded(request: Request) -> Response:
        """Sandbox-only: record an effect that no recon intent asked for.

        How tests produce "an effect recon never intended" for the drift scan
        (`effect_without_intent`), as if someone had used the provider's dashboard or another
        integration. Body: `operation`, `payload`, optional `idempotency_key` (a fresh one by
        default) and optional `metadata`. Recorded exactly like a call of that operation (the
        same idempotency and refusal rules, answers and status codes) but never subject to
        call faults, and its webhook is delivered like any other effect's.
        """
        body = await _read_json_object(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            spec = UnrecordedEffect.model_validate(body)
        except ValidationError as exc:
            return error_response(
                422, "invalid_effect", f"Invalid effect: {describe_validation(exc)}."
            )
        result = await asyncio.to_thread(
            store.submit, spec.operation, spec.key(), spec.payload, spec.metadata
        )
        announce(result)
        return JSONResponse(result.body, status_code=result.status_code)

    @app.post("/v1/faults")
    async def arm_fault(request: Request) -> Response:
        body = await _read_json_object(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            spec = FaultSpec.model_validate(body)
        except ValidationError as exc:
            return error_response(
                422, "invalid_fault", f"Invalid fault: {describe_validation(exc)}."
            )
        armed = board.arm(spec)
        return JSONResponse({"armed": armed.model_dump(mode="json")}, status_code=201)

    @app.get("/v1/faults")
    async def list_faults() -> Response:
        return JSONResponse({"faults": [f.model_dump(mode="json") for f in board.armed()]})

    @app.delete("/v1/faults")
    async def disarm_faults() -> Response:
        return JSONResponse({"disarmed": board.clear()})

    app.include_router(webhook_routes(WebhookOutbox(store), webhooks))
    app.include_router(dashboard_routes(store))
    app.include_router(domain_routes(store))

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    return app
