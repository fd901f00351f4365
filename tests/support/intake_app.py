"""The intake API in the test's own process, over ASGI, with the real Kafka and Postgres
behind it and no HTTP server: for the tests of the API's answers (the end-to-end tests run
the intake as its own process, in the stack)."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from events.topics import Topics
from services.config import Operator, Settings
from services.intake.app import create_app
from services.kafka_setup import ensure_topics


async def intake_settings(
    infra: Any, database_url: str, topic_prefix: str, **overrides: Any
) -> Settings:
    """One tenant (`key-acme`, operator key `ops-acme`), the sandbox at an address nothing
    answers on, fresh topics."""
    settings = Settings(
        **{
            "kafka_bootstrap": infra.kafka_bootstrap,
            "database_url": database_url,
            "topics": Topics(topic_prefix),
            "environment": "test",
            "api_keys": {"key-acme": "acme"},
            # Review resolution and governance want a person: the operator of `acme`.
            "operator_keys": {"ops-acme": Operator("acme", "ops")},
            "providers": {"sandbox": "http://127.0.0.1:9"},
            **overrides,
        }
    )
    await ensure_topics(settings.kafka_bootstrap, settings.topics)
    return settings


def settings_fixture(**overrides: Any) -> Any:
    """A `settings` fixture with these overrides: `settings = settings_fixture(...)`."""

    @pytest.fixture
    async def settings(infra: Any, fresh_database: str, topic_prefix: str) -> Settings:
        return await intake_settings(infra, fresh_database, topic_prefix, **overrides)

    return settings


@asynccontextmanager
async def intake_client(
    settings: Settings, app: FastAPI | None = None, **options: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of `app` (else a new intake app of `settings`), its lifespan running."""
    app = app or create_app(settings)
    # ASGITransport does not run the lifespan, which opens the pool and the producer.
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://intake", **options
        ) as http:
            yield http
