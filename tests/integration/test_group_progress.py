"""A consumer group that is Stable but does no work shows: the intake's `/healthz` names the
partition, how far behind and the member holding it, and its gauges turn
(services.intake.group_progress); a group with nothing to read is not reported, though a
transaction's commit marker and aborted records stay between its position and the log's end.

Against a real broker, a real group member (services.kafka_clients.group_consumer, in the
saga's group, reading recon.events as the saga does) whose handler the test holds, and the
intake's own watch. The threshold is lowered from 60 s to STUCK_S so the tests take seconds,
not minutes; the read after READ_AFTER_S is the production one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client import REGISTRY
from support.intake_app import intake_client, settings_fixture

from services.config import Settings
from services.consumer_groups import DECIDER, SAGA
from services.inline_answers import INLINE_HEADER, inline_answer
from services.intake import group_watch
from services.intake.app import create_app
from services.intake.group_positions import GroupPositions
from services.intake.group_progress import READ_AFTER_S
from services.intake.group_watch import WATCH_INTERVAL_S
from services.kafka_clients import group_consumer

TIMEOUT_S = 60
STUCK_S = 8.0

settings = settings_fixture()


@pytest.fixture(autouse=True)
def stuck_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_watch, "STUCK_AFTER_S", STUCK_S)


class Handler:
    """Handles records of recon.events and commits after each, as the saga's consumer does;
    a record whose value is b"hold" is held until `release` is set (the member keeps
    heartbeating: aiokafka heartbeats from its own task)."""

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.release = asyncio.Event()
        self.holding = asyncio.Event()
        self.handled = 0

    async def run(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=200)
            for tp, records in batches.items():
                for record in records:
                    if record.value == b"hold":
                        self.holding.set()
                        await self.release.wait()
                    await self.consumer.commit({tp: record.offset + 1})
                    self.handled += 1


@asynccontextmanager
async def saga_member(settings: Settings) -> AsyncIterator[Handler]:
    consumer = group_consumer(settings, SAGA, "stuck-member")
    consumer.subscribe([settings.topics.events])
    await consumer.start()
    handler = Handler(consumer)
    running = asyncio.create_task(handler.run())
    try:
        yield handler
    finally:
        handler.release.set()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await consumer.stop()


def gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def saga_check(http: httpx.AsyncClient) -> str:
    checks: dict[str, Any] = (await http.get("/healthz")).json()["checks"]
    return str(checks[SAGA])


async def until(http: httpx.AsyncClient, wanted: Any) -> str:
    while not wanted(found := await saga_check(http)):
        await asyncio.sleep(0.5)
    return found


async def produce(settings: Settings, *values: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(settings.topics.events, value, partition=0)
    finally:
        await producer.stop()


async def test_a_stable_group_whose_handler_is_held_fails_healthz_naming_partition_and_member(
    settings: Settings,
) -> None:
    group = f"{settings.group_prefix}{SAGA}"
    events = settings.topics.events
    async with (
        asyncio.timeout(TIMEOUT_S),
        intake_client(settings) as http,
        saga_member(settings) as handler,
    ):
        await produce(settings, b"one", b"two", b"hold")
        await handler.holding.wait()
        held_at = time.monotonic()
        assert handler.handled == 2

        stuck = await until(http, lambda found: found.startswith("not advancing"))
        waited = time.monotonic() - held_at
        # The group is settled all along: only its position says it does nothing.
        assert gauge("recon_consumer_group_state", group=group, state="Stable") == 1
        assert f"{events}[0] 1 behind" in stuck and "recon-stuck-member@" in stuck, stuck
        # Its clock starts at its last commit (just before the hold); it is read once its
        # position has been still READ_AFTER_S, and judged at the looks after.
        assert STUCK_S <= waited < STUCK_S + 3 * WATCH_INTERVAL_S + 2, waited
        assert (gauge("recon_consumer_group_stuck_seconds", group=group) or 0) >= STUCK_S
        assert gauge("recon_consumer_group_waiting_records", group=group) == 1

        handler.release.set()
        assert await until(http, lambda found: found == "ok") == "ok"
        assert gauge("recon_consumer_group_stuck_seconds", group=group) == 0


async def test_an_idle_group_is_not_reported_though_markers_stay_behind_its_position(
    settings: Settings,
) -> None:
    group = f"{settings.group_prefix}{SAGA}"
    events = settings.topics.events
    writer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, transactional_id=f"{group}-test-writer"
    )
    await writer.start()
    try:
        # As the decider writes recon.events: a committed transaction (its marker after
        # the records) and an aborted one (records no read_committed reader sees).
        async with writer.transaction():
            await writer.send_and_wait(events, b"one", partition=0)
        await writer.begin_transaction()
        await writer.send_and_wait(events, b"aborted", partition=0)
        await writer.abort_transaction()
        app = create_app(settings)
        async with (
            asyncio.timeout(TIMEOUT_S),
            intake_client(settings, app) as http,
            saga_member(settings) as handler,
        ):
            while handler.handled < 1:
                await asyncio.sleep(0.2)
            quiet_from = time.monotonic()
            # The group stays 3 offsets behind the end for good: a marker, an aborted
            # record and its marker.
            while time.monotonic() - quiet_from < STUCK_S + READ_AFTER_S + 2 * WATCH_INTERVAL_S:
                assert await saga_check(http) == "ok"
                await asyncio.sleep(WATCH_INTERVAL_S)
            assert gauge("recon_consumer_group_stuck_seconds", group=group) == 0
            positions = GroupPositions(settings, app.state.admin, "test-positions")
            try:
                standings = await positions.standings((SAGA,), await positions.partitions())
            finally:
                await positions.close()
            assert standings[SAGA][TopicPartition(events, 0)].behind == 3

            # A transaction left open (its producer wedged) holds the group: reported.
            await writer.begin_transaction()
            await writer.send_and_wait(events, b"open", partition=0)
            stuck = await until(http, lambda found: found.startswith("not advancing"))
            assert f"{events}[0]" in stuck and "a transaction open" in stuck, stuck
            await writer.abort_transaction()
            assert await until(http, lambda found: found == "ok") == "ok"
    finally:
        await writer.stop()


async def test_the_deciders_inline_answers_behind_its_position_are_not_work(
    settings: Settings,
) -> None:
    # The decider moves its position past the answers it decided when it wrote them only
    # with the partition's next transaction (services.inline_answers): idle, it
    # stays behind the last of them. A member of its group that does the same.
    group = f"{settings.group_prefix}{DECIDER}"
    observations = settings.topics.observations
    consumer = group_consumer(settings, DECIDER, "stuck-decider")
    consumer.subscribe([observations])
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    await consumer.start()
    try:
        await producer.send_and_wait(observations, b"work", partition=0)
        for _ in range(2):
            await producer.send_and_wait(
                observations, b"answer", partition=0, headers=[INLINE_HEADER]
            )
        read = 0
        while read < 3:
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                read += len(records)
                decided = [r for r in records if not inline_answer(r.headers)]
                if decided:
                    await consumer.commit({tp: decided[-1].offset + 1})
        async with asyncio.timeout(TIMEOUT_S), intake_client(settings) as http:
            quiet_from = time.monotonic()
            while time.monotonic() - quiet_from < STUCK_S + READ_AFTER_S + 2 * WATCH_INTERVAL_S:
                checks = (await http.get("/healthz")).json()["checks"]
                assert checks[DECIDER] == "ok", checks[DECIDER]
                await asyncio.sleep(WATCH_INTERVAL_S)
            assert gauge("recon_consumer_group_stuck_seconds", group=group) == 0

            # A record it has not decided behind them is work: reported.
            await producer.send_and_wait(observations, b"undecided", partition=0)
            while (
                not (await http.get("/healthz"))
                .json()["checks"][DECIDER]
                .startswith("not advancing")
            ):
                await asyncio.sleep(0.5)
    finally:
        await consumer.stop()
        await producer.stop()
