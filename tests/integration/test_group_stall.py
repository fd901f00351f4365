"""A consumer group that stalls shows: the intake's `/healthz` names it and its gauges turn
(services.intake.group_watch), for every group recon runs, the Kafka intents' included.

Against a real broker with real group members (services.kafka_clients.group_consumer). A
group's only member gone (stopped, or dropped by the broker at the session timeout, as a
stalled leader is: docs/operations.md, "A consumer group stalled") leaves it Empty; a
member whose revocation never returns holds its rebalance (PreparingRebalance)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from prometheus_client import REGISTRY
from support.intake_app import intake_client, settings_fixture

from services.config import Settings
from services.consumer_groups import INTENTS
from services.intake.group_watch import NO_CONSUMER, STALLED_AFTER_S
from services.kafka_clients import group_consumer

TIMEOUT_S = 60

settings = settings_fixture()


class HeldRevocation(ConsumerRebalanceListener):  # type: ignore[misc]
    """Revocation waits until `release` is set: the member neither rejoins nor leaves."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.revoking = asyncio.Event()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if revoked:
            self.revoking.set()
            await self.release.wait()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass


@asynccontextmanager
async def member(
    settings: Settings, role: str, listener: ConsumerRebalanceListener | None = None, **options: Any
) -> AsyncIterator[AIOKafkaConsumer]:
    consumer = group_consumer(settings, INTENTS, role, **options)
    consumer.subscribe([settings.topics.events], listener=listener)
    await consumer.start()
    try:
        yield consumer
    finally:
        if listener is not None:
            listener.release.set()  # a held revocation would hold the stop too
        await consumer.stop()


async def assigned(consumer: AIOKafkaConsumer) -> None:
    # Joining completes on a fetch, not on start().
    while not consumer.assignment():
        await consumer.getmany(timeout_ms=500)


def gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def unsettled(group: str) -> float | None:
    return gauge("recon_consumer_group_unsettled_seconds", group=group)


async def intents_check(http: httpx.AsyncClient) -> str:
    checks: dict[str, Any] = (await http.get("/healthz")).json()["checks"]
    return str(checks[INTENTS])


async def until(http: httpx.AsyncClient, wanted: Any) -> str:
    while not wanted(found := await intents_check(http)):
        await asyncio.sleep(0.5)
    return found


async def test_a_group_whose_only_member_left_fails_healthz_and_pages_after_the_session_timeout(
    settings: Settings,
) -> None:
    group = f"{settings.group_prefix}{INTENTS}"
    async with asyncio.timeout(TIMEOUT_S), intake_client(settings) as http:
        async with member(settings, "stall-only") as only:
            await assigned(only)
            assert await until(http, lambda found: found == "ok") == "ok"
            assert gauge("recon_consumer_group_members", group=group) == 1
            assert gauge("recon_consumer_group_unsettled_seconds", group=group) == 0
            # The member's process says it runs one (ReconConsumerGroupMemberMissing sums
            # these over the processes and compares with the members listed).
            assert gauge("recon_consumer_group_processes", group=group) == 1
        left_at = time.monotonic()
        assert gauge("recon_consumer_group_processes", group=group) == 0

        # No member: failing at once, and unsettled from the first look that saw it.
        assert await intents_check(http) == NO_CONSUMER
        assert gauge("recon_consumer_group_members", group=group) == 0
        assert gauge("recon_consumer_group_state", group=group, state="Empty") == 1
        # The condition the alert pages on (ReconConsumerGroupStalled), reached by the
        # watch's own looks, with nobody asking /healthz.
        while (unsettled(group) or 0) < STALLED_AFTER_S:
            await asyncio.sleep(0.5)
        assert time.monotonic() - left_at < STALLED_AFTER_S + 5


async def test_a_rebalance_held_past_the_session_timeout_fails_healthz_and_turns_the_gauges(
    settings: Settings,
) -> None:
    group = f"{settings.group_prefix}{INTENTS}"
    held = HeldRevocation()
    # recon's members leave the rebalance timeout at the session timeout (aiokafka's
    # default, 10 s): the broker drops a member that has not rejoined by then (the first run
    # of this test saw it, the second member then alone and Stable). One with a longer
    # timeout (another client, another release's settings) holds the group as long.
    async with (
        asyncio.timeout(TIMEOUT_S),
        intake_client(settings) as http,
        member(settings, "stall-first", held, rebalance_timeout_ms=TIMEOUT_S * 1000) as first,
    ):
        await assigned(first)
        assert await until(http, lambda found: found == "ok") == "ok"
        assert gauge("recon_consumer_group_state", group=group, state="Stable") == 1

        second = group_consumer(settings, INTENTS, "stall-second")
        second.subscribe([settings.topics.events])
        # Its start waits for its JoinGroup's answer, which waits for the held member. The
        # group turns PreparingRebalance at that JoinGroup, before the first member hears.
        held_at = time.monotonic()
        joining = asyncio.create_task(second.start())
        try:
            await held.revoking.wait()
            # A rebalance is no stall until the session timeout has passed.
            assert await intents_check(http) == "ok"
            stalled = await until(http, lambda found: found.startswith("stalled"))
            waited = time.monotonic() - held_at
            assert "PreparingRebalance" in stalled and "recon-stall-first" in stalled, stalled
            assert STALLED_AFTER_S <= waited < STALLED_AFTER_S + 5, waited
            assert (unsettled(group) or 0) >= STALLED_AFTER_S
            assert gauge("recon_consumer_group_members", group=group) == 2
            assert gauge("recon_consumer_group_state", group=group, state="PreparingRebalance") == 1

            held.release.set()
            await joining
            await assigned(second)
            assert await until(http, lambda found: found == "ok") == "ok"
            assert unsettled(group) == 0
        finally:
            held.release.set()
            await second.stop()
