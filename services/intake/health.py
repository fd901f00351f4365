"""`GET /healthz`: whether Postgres and Kafka answer, and whether each consumer group recon
runs (services.consumer_groups.GROUPS: the decider, which also makes the provider calls,
the projector, the saga and the Kafka intents) has a member and has not stalled, as the
intake's group watch judges it (services.intake.group_watch)."""

import asyncio

import asyncpg
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from services.config import Settings
from services.intake.errors import DATABASE_DOWN
from services.intake.openapi import HealthBody
from services.kafka_clients import connection
from services.pg_pool import ping

HEALTH_TIMEOUT_S = 3.0

router = APIRouter()


@router.get(
    "/healthz",
    responses={
        200: {"model": HealthBody, "description": "every dependency answers"},
        503: {"model": HealthBody, "description": "`reason` names what does not answer"},
    },
)
async def healthz(request: Request) -> JSONResponse:
    checks = await _health(request.app)
    failing = {name: state for name, state in checks.items() if state != "ok"}
    if failing:
        reason = "; ".join(f"{name}: {state}" for name, state in failing.items())
        return JSONResponse(
            {"status": "unavailable", "reason": reason, "checks": checks}, status_code=503
        )
    return JSONResponse({"status": "ok", "checks": checks})


def admin_client(settings: Settings) -> AIOKafkaAdminClient:
    """The client /healthz describes consumer groups with, bounded like every check."""
    return AIOKafkaAdminClient(
        **connection(settings.kafka_bootstrap, "intake-health"),
        request_timeout_ms=int(HEALTH_TIMEOUT_S * 1000),
    )


async def _health(app: FastAPI) -> dict[str, str]:
    checks: dict[str, str] = {}
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            async with app.state.pool.acquire() as conn:
                await ping(conn)
        checks["postgres"] = "ok"
    except (TimeoutError, *DATABASE_DOWN, asyncpg.PostgresError) as exc:
        checks["postgres"] = f"not answering ({exc!r})"
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            await app.state.producer.client.fetch_all_metadata()
        checks["kafka"] = "ok"
    except (TimeoutError, KafkaError) as exc:
        checks["kafka"] = f"not answering ({exc!r})"
        return checks
    checks.update(await app.state.group_watch.look())
    return checks
