"""Request body caps at the intake's edge (issue 7, items 1 and 11), against the real broker
and database: an oversized body is refused with 413 before it is read whole, and nothing of
it is recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from support.intake_app import intake_client, settings_fixture

from events.topics import PARTITIONS
from services.config import Settings
from services.intake.delivery_batches import RECORD_BOUND_S
from services.intake.example import example_transaction

ACME = {"Authorization": "Bearer key-acme", "Content-Type": "application/json"}
OPS = {"Authorization": "Bearer ops-acme", "Content-Type": "application/json"}
LIMIT = 8 * 1024
WEBHOOK_LIMIT = 2 * 1024
CHUNK = 1024


settings = settings_fixture(
    max_body_bytes=LIMIT,
    webhook_max_body_bytes=WEBHOOK_LIMIT,
)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with intake_client(settings) as http:
        yield http


class Endless:
    """A chunked body (no Content-Length) that counts how much of it the server pulled."""

    def __init__(self, prefix: bytes, total: int) -> None:
        self.prefix = prefix
        self.total = total
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.prefix
        self.pulled += len(self.prefix)
        while self.pulled < self.total:
            self.pulled += CHUNK
            yield b" " * CHUNK


async def nothing_recorded(settings: Settings) -> None:
    # A delivery answered is recorded within the intake's bound: one recorded by mistake
    # would be there by now.
    await asyncio.sleep(2 * RECORD_BOUND_S)
    conn = await asyncpg.connect(settings.database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM intents") == 0
        assert await conn.fetchval("SELECT count(*) FROM webhook_deliveries") == 0
    finally:
        await conn.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap)
    await consumer.start()
    try:
        for topic in (settings.topics.commands, settings.topics.observations):
            ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
            assert sum(ends.values()) == 0, topic
    finally:
        await consumer.stop()


def oversized_submission() -> bytes:
    body = example_transaction("order-big")
    body["steps"][0]["payload"]["note"] = "x" * LIMIT
    return json.dumps(body).encode()


def assert_too_large(response: httpx.Response, limit: int) -> None:
    assert response.status_code == 413, response.text
    assert response.json()["error"] == "body_too_large"
    assert str(limit) in response.json()["message"]


async def test_a_submission_declared_larger_than_the_limit_is_refused_and_records_nothing(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    response = await client.post("/v1/transactions", content=oversized_submission(), headers=ACME)

    assert_too_large(response, LIMIT)
    await nothing_recorded(settings)
    # Under the limit the same intent is taken as usual.
    fits = await client.post(
        "/v1/transactions", json=example_transaction("order-small"), headers=ACME
    )
    assert fits.status_code == 202, fits.text


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        ("/v1/transactions", LIMIT),
        ("/v1/transactions/order-1/abort", LIMIT),
        ("/v1/reviews/rv_1/resolve", LIMIT),
        # No API key and no signature: the cap comes before anything is checked.
        ("/v1/webhooks/sandbox", WEBHOOK_LIMIT),
    ],
    ids=["submission", "abort", "resolve", "webhook"],
)
async def test_a_streamed_body_is_refused_as_soon_as_it_passes_the_limit(
    client: httpx.AsyncClient, settings: Settings, path: str, limit: int
) -> None:
    body = Endless(b'{"tx_id": "order-1", "agent_id": "', total=64 * 1024 * 1024)

    # Resolving takes an operator key (an agent key is refused before the body is read).
    key = OPS if path.endswith("/resolve") else ACME
    response = await client.post(path, content=body, headers=key)

    assert_too_large(response, limit)
    # Reading stopped at the first chunk past the limit: 64 MiB were offered.
    assert body.pulled <= limit + 2 * CHUNK, body.pulled
    await nothing_recorded(settings)


async def test_an_unsigned_oversized_webhook_is_refused_before_it_is_read(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    response = await client.post("/v1/webhooks/sandbox", content=b"{" + b" " * WEBHOOK_LIMIT + b"}")

    assert_too_large(response, WEBHOOK_LIMIT)
    await nothing_recorded(settings)
