"""The projector process end to end: recon.events on the real broker -> Postgres."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from support.txbuilders import log_of, observed, submit

from events.inputs import Outcome
from events.keys import partition_key
from events.topics import Topics
from services.config import Settings
from services.kafka_setup import ensure_topics
from services.projector.runtime import run_projector

TIMEOUT_S = 60.0


async def wait_for_row(url: str, query: str, expected: Any) -> None:
    """Poll the projection's own position: there is nothing to subscribe to in Postgres."""
    conn = await asyncpg.connect(url)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                if await conn.fetchval(query) == expected:
                    return
                await asyncio.sleep(0.1)
    finally:
        await conn.close()


async def test_projects_events_and_dead_letters_poison(
    infra: Any, fresh_database: str, topic_prefix: str
) -> None:
    settings = Settings(
        kafka_bootstrap=infra.kafka_bootstrap,
        database_url=fresh_database,
        topics=Topics(topic_prefix),
        environment="test",
    )
    await ensure_topics(settings.kafka_bootstrap, settings.topics)
    log = log_of(submit(["charge"]), observed("charge", 1, Outcome.SUCCEEDED))
    key = partition_key("demo", "tx-1")
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(settings.topics.events, log[0].model_dump_json().encode(), key)
        await producer.send_and_wait(settings.topics.events, b"not an envelope", key)
        for envelope in log[1:]:
            await producer.send_and_wait(
                settings.topics.events, envelope.model_dump_json().encode(), key
            )
    finally:
        await producer.stop()

    stop = asyncio.Event()
    projector = asyncio.create_task(run_projector(settings, stop))
    try:
        await wait_for_row(
            fresh_database,
            "SELECT status || ':' || last_seq FROM transactions WHERE tx_id = 'tx-1'",
            f"committed:{len(log)}",
        )
        await wait_for_row(
            fresh_database,
            "SELECT sum(next_offset) FROM projection_offsets",
            len(log) + 1,
        )
    finally:
        stop.set()
        await asyncio.wait_for(projector, TIMEOUT_S)

    dead = AIOKafkaConsumer(
        settings.topics.dead_letters,
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
    )
    await dead.start()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            record = await dead.getone()
    finally:
        await dead.stop()
    assert record.value == b"not an envelope"
    assert dict(record.headers)["reason"].startswith(b"not an event envelope")
