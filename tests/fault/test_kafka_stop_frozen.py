"""A process asked to stop while its broker is frozen stops its consumers in bounded time,
and what each held is released (services.kafka_clients.stop_consumer).

The broker is the session's own, frozen (SIGSTOP) once a real group consumer has joined its
group and been given its partitions: aiokafka's own `stop()` then waits for the LeaveGroup
request's answer, `request_timeout_ms` (40 s), and for the coordinator's request in flight
before it, if any. Two of recon's ways of stopping a consumer at process stop: the
at-least-once consumer's run (the saga, the dispatcher) and a process's exit stack
(services.closing.stopped_with: the projector, the intents reader, the CLI's readers)."""

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from support.broker_faults import frozen
from support.kafka_leaks import unstopped
from support.stop_timing import ended_within
from support.topic_setup import create_topic

from events.topics import Topics
from services.at_least_once import AtLeastOnceConsumer, Batch
from services.closing import stopped_with
from services.config import Settings
from services.devtools.infra import KafkaBroker
from services.kafka_clients import CONSUMER_STOP_S, acked_producer, client_id, group_consumer
from services.kafka_start import start_kafka_client

pytestmark = pytest.mark.timeout(180)

# The bound, then the cancelled tasks' ends (a second each at most) and the closes.
STOP_BOUND_S = CONSUMER_STOP_S + 3.0
ROLE = "broker-frozen-at-stop"

Stop = Callable[[], Coroutine[Any, Any, None]]


async def _assigned(consumer: AIOKafkaConsumer) -> None:
    async with asyncio.timeout(60):
        while not consumer.assignment():
            await asyncio.sleep(0.1)


async def _at_least_once(settings: Settings, topic: str) -> tuple[AIOKafkaConsumer, Stop]:
    producer = acked_producer(settings, f"{ROLE}-dead-letters")  # never started
    reader = AtLeastOnceConsumer(settings, ROLE, [topic], producer, role=ROLE, max_records=10)
    stop = asyncio.Event()
    run = asyncio.create_task(reader.run(stop, _ignore))

    async def stopped() -> None:
        stop.set()
        try:
            await run
        finally:
            await producer.stop()

    return reader.consumer, stopped


async def _exit_stack(settings: Settings, topic: str) -> tuple[AIOKafkaConsumer, Stop]:
    stack = AsyncExitStack()
    consumer = stopped_with(stack, group_consumer(settings, ROLE, ROLE))
    consumer.subscribe([topic])
    assert await start_kafka_client(consumer, ROLE, asyncio.Event())
    # A member is given its partitions by a poll (aiokafka joins in the background).
    fetching = asyncio.create_task(consumer.getmany(timeout_ms=60000))

    async def stopped() -> None:
        fetching.cancel()
        await stack.aclose()

    return consumer, stopped


@pytest.mark.parametrize(
    "owner", [_at_least_once, _exit_stack], ids=["at-least-once", "exit-stack"]
)
async def test_a_consumer_stopped_while_the_broker_is_frozen_stops_in_bounded_time(
    owner: Callable[[Settings, str], Awaitable[tuple[AIOKafkaConsumer, Stop]]],
    kafka_broker: KafkaBroker,
    topic_prefix: str,
) -> None:
    bootstrap, topic = kafka_broker.bootstrap, f"{topic_prefix}broker-frozen-at-stop"
    await create_topic(bootstrap, topic, 2)
    settings = Settings(
        kafka_bootstrap=bootstrap, database_url="", topics=Topics(topic_prefix), environment="test"
    )
    consumer, stopped = await owner(settings, topic)
    await _assigned(consumer)
    stopping: asyncio.Task[None] | None = None
    try:
        with frozen(kafka_broker):
            stopping = asyncio.create_task(stopped())
            await ended_within(stopping, STOP_BOUND_S, "the consumer's stop")
            stopping.result()
            # Released while the broker is still frozen: nothing of the consumer runs on.
            coordinator = consumer._coordinator
            tasks = [coordinator._coordination_task, coordinator._heartbeat_task]
            assert all(task is None or task.done() for task in tasks), tasks
            assert all(task.done() for task in consumer._fetcher._pending_tasks)
            assert consumer._client._sync_task is None, "the metadata task runs on"
            assert not any(conn.connected() for conn in consumer._client._conns.values())
    finally:
        if stopping is not None:  # the broker is back: a stop left waiting ends now
            await asyncio.wait_for(stopping, 60)
    assert unstopped(client_id(ROLE)) == []


async def _ignore(batch: Batch) -> None:
    pass
