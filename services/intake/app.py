"""The intake API (docs/contract.md, "Intake API"), wired: its connections, its routes (one
module each) and the one place where refusals become HTTP answers.

Routes: transactions (submit, list, read, events), abort, reviews, drift, webhooks, health,
the governance routes, and the operator console's pages under /console
(services.intake.console).
"""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from datetime import timedelta

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from events.policy import PolicyDocument
from services.closing import stopped_with
from services.config import Settings
from services.intake import (
    abort,
    approvals,
    catalog,
    console,
    drift,
    health,
    kill_switches,
    method_not_allowed,
    openapi,
    openapi_catalog,
    operations,
    ownership,
    policy,
    previews,
    receipts,
    resolutions,
    reviews,
    transactions,
    webhooks,
)
from services.intake.body_limit import BodyLimit
from services.intake.delivery_batches import DeliveryBatches, open_check_pool
from services.intake.errors import (
    DATABASE_DOWN,
    RETRY_AFTER_S,
    UNSTORABLE,
    UNSTORABLE_MESSAGE,
    ApiError,
    retry_after,
    summary,
)
from services.intake.group_watch import GroupWatch
from services.intake.intent_claims import IntentClaims
from services.intake.lane import Lane
from services.intake.policy_cache import PolicyCache
from services.intake.produce import intake_producer
from services.intake.produced_marks import ProducedMarks
from services.intake.request_span import RequestSpan
from services.intake.slots import Slots
from services.intake.submission import SubmissionRefused, SubmissionRequest
from services.kafka_setup import ensure_recon_topics
from services.postgres_start import open_pool
from services.providers.http import ProviderHttp
from services.providers.registry import build_accounts, catalog_of
from services.stop_race import StoppedStarting, unless_stopped

log = logging.getLogger(__name__)


async def _ended(task: asyncio.Task[None]) -> None:
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task


async def _close_console_counts(app: FastAPI) -> None:
    counts = getattr(app.state, "console_kafka", None)
    if counts is not None:
        await counts.close()


def create_app(settings: Settings, stop: asyncio.Event | None = None) -> FastAPI:
    """The intake's app; `stop`, set, ends its lifespan's start-up (StoppedStarting) where it
    waits for Postgres (its pools) or Kafka (topic set-up, the producer's and the admin
    client's starts)."""
    # The providers' catalog, read once now: an adapter declaring its operations wrongly
    # stops start-up here (AdapterSetupError) rather than failing every submission.
    catalog_of(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Each resource's close is on the stack from the moment it exists, so whichever
        # later step fails (or the intake stops) closes everything opened before it, in
        # reverse: the watch before the admin client it asks with, the producer before
        # the pools (services.closing).
        async with AsyncExitStack() as stack:
            # Postgres restarting while the intake starts is waited out, not a crash.
            pool = await open_pool(settings.database_url, stop=stop, min_size=1, max_size=10)
            stack.push_async_callback(pool.close)
            checks = await open_check_pool(settings.database_url, stop)
            stack.push_async_callback(checks.close)
            # Producing to a missing topic would let the broker create it with its default
            # partition count, breaking co-partitioning.
            if not await ensure_recon_topics(settings, stop=stop):
                raise StoppedStarting("during topic set-up")
            producer = stopped_with(stack, intake_producer(settings, "intake-producer"))
            admin = stopped_with(stack, health.admin_client(settings))
            # Raced with the stop: a broker that answers nothing holds either start 40 s a
            # request. Not retried (start_kafka_client): a broker lost since the topics'
            # set-up ends the start-up with its error, for its supervisor to start again.
            for client in (producer, admin):
                if not await unless_stopped(client.start, stop):
                    raise StoppedStarting("while its Kafka clients started")
            app.state.pool, app.state.producer, app.state.admin = pool, producer, admin
            # The console's Kafka counts, made at its first page (services.intake.console).
            stack.push_async_callback(_close_console_counts, app)
            app.state.group_watch = GroupWatch(admin, settings)
            stack.push_async_callback(app.state.group_watch.close)
            # Pushed after its readers' close: the watch has ended before they close.
            stack.push_async_callback(_ended, asyncio.create_task(app.state.group_watch.run()))
            app.state.produced_marks = ProducedMarks(pool)
            app.state.intent_claims = IntentClaims(pool)
            app.state.delivery_batches = DeliveryBatches(
                pool,
                checks,
                timedelta(seconds=settings.webhook_dedupe_horizon_s),
                settings.provider_accounts,
            )
            # Before the pools close: the deliveries answered and not recorded yet.
            stack.push_async_callback(app.state.delivery_batches.close)
            if settings.policy_file:
                await policy.install_file(app, settings.policy_file)
            http = await stack.enter_async_context(ProviderHttp(settings.provider_timeout_s))
            # Every account's adapter, for its webhook reader (services.intake.webhooks):
            # made once, and an adapter refusing its configuration stops the intake's
            # start-up as it stops the dispatcher's.
            app.state.webhook_readers = build_accounts(http, settings)
            yield

    app = FastAPI(
        title="recon intake",
        version="1",
        lifespan=lifespan,
        # recon's own request span and metrics (services.intake.request_span) are the
        # intake's: FastAPI's native telemetry would add a second server span per request
        # once services.tracing installs a tracer provider, and, off, it still asked the
        # OpenTelemetry globals whether it was on at every request (~2 % of the intake's
        # CPU at c30, issue 24).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.policies = PolicyCache()
    app.state.receipt_slots = Slots(settings.receipt_concurrency)
    # Added first, so innermost: inside the body limit and the request span, where
    # FastAPI's router would be (services.intake.lane).
    app.add_middleware(Lane, host=app)
    app.add_middleware(
        BodyLimit,
        max_body_bytes=settings.max_body_bytes,
        webhook_max_body_bytes=settings.webhook_max_body_bytes,
    )
    # Webhooks are signed by their provider, every other /v1 route takes an API key.
    for routes in (
        transactions,
        receipts,
        abort,
        reviews,
        drift,
        webhooks,
        health,
        operations,
        ownership,
    ):
        app.include_router(routes.router)
    for governance in (policy, kill_switches, previews, approvals, catalog):
        app.include_router(governance.router)
    openapi.install(
        app,
        [
            *(SubmissionRequest, resolutions.ResolveRequest, abort.AbortRequest),
            openapi.WebhookNotice,
            *(ownership.SessionRequest, ownership.ReviewAsked),
            *(PolicyDocument, policy.BreakerResetRequest, kill_switches.KillSwitchRequest),
            *(approvals.ApprovalRequest, approvals.RejectionRequest),
        ],
    )
    openapi_catalog.install(app, settings)
    console.install(app)
    _answer_refusals(app)
    policy.install(app)
    method_not_allowed.install(app)
    app.add_middleware(RequestSpan)
    return app


def _answer_refusals(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())

    @app.exception_handler(SubmissionRefused)
    async def submission_refused(request: Request, exc: SubmissionRefused) -> JSONResponse:
        return JSONResponse({"error": exc.code, "message": exc.message}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {"error": "invalid_request", "message": summary(exc.errors())}, status_code=422
        )

    for down in DATABASE_DOWN:

        @app.exception_handler(down)
        async def database_down(request: Request, exc: Exception) -> JSONResponse:
            log.warning("database unavailable: %r", exc)
            return JSONResponse(
                {"error": "unavailable", "message": "the database is unavailable; retry later"},
                status_code=503,
                headers=retry_after(RETRY_AFTER_S),
            )

    # Postgres text and jsonb cannot hold a NUL character, so a request carrying one (in a
    # path, a query or a body) fails at its first statement, before anything is written.
    # That is the client's mistake, not the server's: a 422, not a 500.
    for unstorable in UNSTORABLE:

        @app.exception_handler(unstorable)
        async def unstorable_text(request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse(
                {"error": "invalid_request", "message": UNSTORABLE_MESSAGE}, status_code=422
            )
