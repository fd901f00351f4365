"""The projector process end to end: recon.events on the real broker -> Postgres."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord
from support.txbuilders import log_of, log_with_note, observed, submit

from events.inputs import Outcome
from events.keys import partition_key
from events.topics import Topics
from projections.decode import UNSTORABLE_EVENT
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
    settings = await _settings(infra, fresh_database, topic_prefix)
    log = log_of(submit(["charge"]), observed("charge", 1, Outcome.SUCCEEDED))
    values = [env.model_dump_json().encode() for env in log]
    poisoned = [values[0], b"not an envelope", *values[1:]]
    await _write(settings, partition_key("demo", "tx-1"), poisoned)
    await _project_until(
        settings,
        (
            "SELECT status || ':' || last_seq FROM transactions WHERE tx_id = 'tx-1'",
            f"committed:{len(log)}",
        ),
        ("SELECT sum(next_offset) FROM projection_offsets", len(log) + 1),
    )

    record = await _first_dead_letter(settings)
    assert record.value == b"not an envelope"
    assert dict(record.headers)["reason"].startswith(b"not an event envelope")


async def test_an_event_postgres_cannot_store_is_set_aside_and_the_partition_goes_on(
    infra: Any, fresh_database: str, topic_prefix: str
) -> None:
    # Written past the decider (an older version's log, or a writer with topic access): a
    # transaction whose first event holds a NUL, then another on the same partition. Stored,
    # the NUL failed every batch that held it, and the second was never projected.
    settings = await _settings(infra, fresh_database, topic_prefix)
    unstorable = log_with_note("tx-nul", "\x00")
    after = log_of(submit(["charge"], tx_id="tx-2"), tx_id="tx-2")
    # One partition for both.
    values = [env.model_dump_json().encode() for env in (*unstorable, *after)]
    await _write(settings, partition_key("demo", "tx-2"), values)
    await _project_until(
        settings,
        (
            "SELECT string_agg(tx_id || ':' || last_seq, ',') FROM transactions",
            f"tx-2:{len(after)}",
        ),
        ("SELECT sum(next_offset) FROM projection_offsets", len(values)),
    )

    record = await _first_dead_letter(settings)
    assert record.value == unstorable[0].model_dump_json().encode()
    assert dict(record.headers)["reason"] == UNSTORABLE_EVENT.encode()


async def _settings(infra: Any, database_url: str, topic_prefix: str) -> Settings:
    settings = Settings(
        kafka_bootstrap=infra.kafka_bootstrap,
        database_url=database_url,
        topics=Topics(topic_prefix),
        environment="test",
    )
    await ensure_topics(settings.kafka_bootstrap, settings.topics)
    return settings


async def _first_dead_letter(settings: Settings) -> ConsumerRecord[bytes, bytes]:
    dead = AIOKafkaConsumer(
        settings.topics.dead_letters,
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
    )
    await dead.start()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            record: ConsumerRecord[bytes, bytes] = await dead.getone()
            return record
    finally:
        await dead.stop()


async def _write(settings: Settings, key: bytes, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(settings.topics.events, value, key)
    finally:
        await producer.stop()


async def _project_until(settings: Settings, *rows: tuple[str, Any]) -> None:
    """Runs the projector until each query answers what it is paired with, in turn."""
    stop = asyncio.Event()
    projector = asyncio.create_task(run_projector(settings, stop))
    try:
        for query, expected in rows:
            await wait_for_row(settings.database_url, query, expected)
    finally:
        stop.set()
        await asyncio.wait_for(projector, TIMEOUT_S)
