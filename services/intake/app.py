"""The intake API (CONTRACT.md, "Intake API").

An intent is answered 202 only once the broker has acknowledged its SubmitTransaction
(promise 7). The `intents` row, written first, is the guard that turns concurrent or
repeated submissions of one tx_id into one intent and refuses a different body with 409;
Kafka, not the row, is the record of the intent; the row is shown as accepted only once
Kafka has acknowledged it (services.intake.intents).
"""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupCoordinatorNotAvailableError, KafkaError
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from events.keys import partition_key
from projections.schema import apply_schema
from services.config import Settings
from services.example_intent import example_transaction
from services.intake import abort, auth, drift, intents, openapi, queries, reviews, webhooks
from services.intake.body_limit import BodyLimit
from services.intake.errors import ApiError
from services.intake.openapi import HealthBody, TxId, errors, json_body, ok
from services.intake.produce import intake_producer, produce_acked
from services.intake.response_models import EventList, SubmissionAccepted, TransactionView
from services.intake.submission import (
    SubmissionRequest,
    check,
    operation_specs,
    submit_command,
)
from services.kafka_setup import ensure_topics

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 3.0
CONSUMERS = ("recon-decider", "recon-dispatcher", "recon-projector", "recon-saga")
_DATABASE_DOWN = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError)


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await asyncpg.create_pool(settings.database_url, min_size=1, max_size=10)
        try:
            async with pool.acquire() as conn:
                await apply_schema(conn)
            # Producing to a missing topic would let the broker create it with its default
            # partition count, breaking co-partitioning.
            await ensure_topics(
                settings.kafka_bootstrap, settings.topics, durability=settings.kafka_durability
            )
            producer = intake_producer(settings)
            admin = AIOKafkaAdminClient(
                bootstrap_servers=settings.kafka_bootstrap,
                request_timeout_ms=int(HEALTH_TIMEOUT_S * 1000),
            )
            await producer.start()
            try:
                await admin.start()
                try:
                    app.state.pool, app.state.producer, app.state.admin = pool, producer, admin
                    yield
                finally:
                    await admin.close()
            finally:
                await producer.stop()
        finally:
            await pool.close()

    app = FastAPI(title="recon intake", version="1", lifespan=lifespan)
    app.state.settings = settings
    app.add_middleware(
        BodyLimit,
        max_body_bytes=settings.max_body_bytes,
        webhook_max_body_bytes=settings.webhook_max_body_bytes,
    )
    # Reviews, drift and provider webhooks (issue 3); webhooks are signed, not keyed.
    for router in (reviews.router, drift.router, webhooks.router):
        app.include_router(router)
    app.include_router(abort.router)
    openapi.install(
        app,
        [SubmissionRequest, reviews.ResolveRequest, abort.AbortRequest, openapi.WebhookNotice],
    )

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {"error": "invalid_request", "message": _summary(exc.errors())}, status_code=422
        )

    for down in _DATABASE_DOWN:

        @app.exception_handler(down)
        async def database_down(request: Request, exc: Exception) -> JSONResponse:
            log.warning("database unavailable: %r", exc)
            return JSONResponse(
                {"error": "unavailable", "message": "the database is unavailable; retry later"},
                status_code=503,
            )

    # Postgres text and jsonb cannot hold a NUL character, so a request carrying one (in a
    # path, a query or a body) fails at its first statement, before anything is written.
    # That is the client's mistake, not the server's: a 422, not a 500.
    for unstorable in (
        asyncpg.CharacterNotInRepertoireError,
        asyncpg.UntranslatableCharacterError,
    ):

        @app.exception_handler(unstorable)
        async def unstorable_text(request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse(
                {
                    "error": "invalid_request",
                    "message": "text must not contain NUL (\\u0000) characters",
                },
                status_code=422,
            )

    @app.post(
        "/v1/transactions",
        status_code=202,
        responses={**ok(SubmissionAccepted, 202), **errors(401, 409, 413, 422, 503)},
        openapi_extra=json_body(SubmissionRequest, example=example_transaction()),
    )
    async def submit(request: Request, tenant: str = Depends(auth.tenant)) -> JSONResponse:
        return await _submit(request, tenant, settings)

    @app.get(
        "/v1/transactions/{tx_id}",
        responses={**ok(TransactionView), **errors(401, 404, 422, 503)},
        response_model=None,
    )
    async def get_transaction(
        tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
    ) -> dict[str, Any]:
        async with request.app.state.pool.acquire() as conn:
            found = await queries.transaction(conn, tenant, tx_id)
        if found is None:
            raise _not_found(tx_id)
        return found

    @app.get(
        "/v1/transactions/{tx_id}/events",
        responses={**ok(EventList), **errors(401, 404, 422, 503)},
        response_model=None,
    )
    async def get_events(
        tx_id: TxId, request: Request, tenant: str = Depends(auth.tenant)
    ) -> dict[str, Any]:
        async with request.app.state.pool.acquire() as conn:
            found = await queries.events(conn, tenant, tx_id)
        if found is None:
            raise _not_found(tx_id)
        return {"events": found}

    @app.get(
        "/healthz",
        responses={
            200: {"model": HealthBody, "description": "every dependency answers"},
            503: {"model": HealthBody, "description": "`reason` names what does not answer"},
        },
    )
    async def healthz(request: Request) -> JSONResponse:
        checks = await _health(request.app, settings)
        failing = {name: state for name, state in checks.items() if state != "ok"}
        if failing:
            reason = "; ".join(f"{name}: {state}" for name, state in failing.items())
            return JSONResponse(
                {"status": "unavailable", "reason": reason, "checks": checks}, status_code=503
            )
        return JSONResponse({"status": "ok", "checks": checks})

    return app


async def _submit(request: Request, tenant: str, settings: Settings) -> JSONResponse:
    # The body is parsed here rather than by FastAPI so that authentication is checked
    # before anything about the body is revealed, malformed JSON included.
    try:
        submission = SubmissionRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", _summary(exc.errors())) from None
    check(submission, settings.providers)
    try:
        fingerprint = submission.fingerprint()
    except ValueError:
        raise ApiError(
            422, "invalid_request", "payloads must not contain NaN or Infinity"
        ) from None
    specs = operation_specs(submission, tenant=tenant, environment=settings.environment)
    intent = intents.Intent(tenant, submission.tx_id, fingerprint, submission.agent_id, specs)
    async with request.app.state.pool.acquire() as conn:
        await intents.claim(conn, intent, settings.pending_horizon_s)
    # An identical resubmission produces again: it is harmless (the decider accepts only
    # the first SubmitTransaction of a tx_id) and it covers a crash between the insert
    # above and the broker's acknowledgement of an earlier attempt.
    command = submit_command(
        submission,
        tenant=tenant,
        fingerprint=fingerprint,
        operations=specs,
        issued_at=datetime.now(UTC),
    )
    await produce_acked(
        request.app.state.producer,
        settings.topics.commands,
        key=partition_key(tenant, submission.tx_id),
        value=command.model_dump_json().encode(),
        what="the intent",
    )
    async with request.app.state.pool.acquire() as conn:
        await intents.mark_produced(conn, intent)
    return JSONResponse(
        {
            "tx_id": submission.tx_id,
            "status": "accepted",
            "operations": [{"action": s.action, "op_key": s.op_key} for s in specs],
        },
        status_code=202,
    )


async def _health(app: FastAPI, settings: Settings) -> dict[str, str]:
    checks: dict[str, str] = {}
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            async with app.state.pool.acquire() as conn:
                await conn.fetchval("SELECT 1")
        checks["postgres"] = "ok"
    except (TimeoutError, *_DATABASE_DOWN, asyncpg.PostgresError) as exc:
        checks["postgres"] = f"not answering ({exc!r})"
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            await app.state.producer.client.fetch_all_metadata()
        checks["kafka"] = "ok"
    except (TimeoutError, KafkaError) as exc:
        checks["kafka"] = f"not answering ({exc!r})"
        return checks
    for name in CONSUMERS:
        checks[name] = await _consumer_group(app.state.admin, f"{settings.group_prefix}{name}")
    return checks


async def _consumer_group(admin: AIOKafkaAdminClient, group: str) -> str:
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            responses = await admin.describe_consumer_groups([group])
    except GroupCoordinatorNotAvailableError:
        # No coordinator yet means the group was never joined on this cluster.
        return "no consumer running"
    except (TimeoutError, KafkaError) as exc:
        return f"cannot describe the consumer group ({exc!r})"
    members = sum(
        len(described["members"])
        for response in responses
        for described in response.to_object()["groups"]
        if described["group"] == group
    )
    return "ok" if members > 0 else "no consumer running"


def _not_found(tx_id: str) -> ApiError:
    return ApiError(
        404, "not_found", f"no transaction {tx_id!r} for this API key's tenant; check the tx_id"
    )


def _summary(errors: Any) -> str:
    """One line per problem, `where: what`, so a person can fix the request."""
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        message = str(error.get("msg", "invalid"))
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts) or "invalid request"
