"""A process's clean stop while its broker is frozen ends in bounded time: what the stop
still has to send (a final offset commit, a producer's records in flight) or waits for (the
projector's lag marker) is given up past its bound. The decider's hand-over has its own
test (test_decider_hand_over.py).

The broker is the session's own, frozen (SIGSTOP: support.broker_faults) at the moment the
stop's work would go to it: it takes each request and answers none, as a hung broker or one
behind a firewall that drops packets does, so aiokafka waits `request_timeout_ms` (40 s) a
request, and a commit retries a coordinator it cannot reach without end."""

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from support.broker_faults import frozen
from support.kafka_leaks import unstopped
from support.stop_timing import cancelled_while_stopping, ended_within
from support.topic_setup import create_topic

from events.topics import Topics
from services.at_least_once import COMMIT_TIMEOUT_S, AtLeastOnceConsumer, Batch
from services.closing import stopped_with
from services.config import Settings
from services.devtools.infra import KafkaBroker
from services.kafka_clients import (
    CONSUMER_STOP_S,
    PRODUCER_STOP_S,
    acked_producer,
    client_id,
    stop_producer,
)
from services.projector.runtime import LAG_MARKER_TIMEOUT_S, Projector

pytestmark = pytest.mark.timeout(180)

# A bound, then the cancelled tasks' ends (a second each at most) and the closes.
SLACK_S = 3.0


def _settings(broker: KafkaBroker, prefix: str) -> Settings:
    return Settings(
        kafka_bootstrap=broker.bootstrap, database_url="", topics=Topics(prefix), environment="test"
    )


async def test_a_final_offset_commit_the_frozen_broker_never_answers_is_given_up(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The at-least-once consumer (the saga, the Kafka intents reader) handled a record and
    stops: its offset is committed at the stop, to a broker that does not answer. aiokafka
    retries the commit for as long as the coordinator is away; given up, the record is read
    again by the partition's next owner (at-least-once: handlers are harmless twice)."""
    role = "commit-frozen-at-stop"
    settings = _settings(kafka_broker, topic_prefix)
    topic = f"{topic_prefix}{role}"
    await create_topic(kafka_broker.bootstrap, topic, 1)
    producer = acked_producer(settings, role)
    await producer.start()
    reader = AtLeastOnceConsumer(settings, role, [topic], producer, role=role, max_records=10)
    stop, handling, handled = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def handle(batch: Batch) -> None:
        handling.set()
        await handled.wait()

    run = asyncio.create_task(reader.run(stop, handle))
    try:
        await producer.send_and_wait(topic, b"one")
        await asyncio.wait_for(handling.wait(), 60)
        # The stop commits only partitions the member owns (PendingOffsets.commit drops the
        # others): a rejoin still settling under load (a clean-clone CI run) left none owned,
        # and the stop rightly sent nothing. Frozen once the member has owned its partition
        # for STEADY_S on end: a check of the assignment alone was met just before another
        # rejoin took the partition away (a clean-clone CI run again, stop 60: the stop ended
        # in 5.0 s, its consumer's bound, with no commit sent and nothing logged).
        owned = TopicPartition(topic, 0)
        async with asyncio.timeout(60):
            await _owned_steadily(reader, owned)
        with frozen(kafka_broker), caplog.at_level(logging.WARNING):
            stop.set()
            handled.set()
            abandoned = asyncio.create_task(_commit_requests_until(run))
            await ended_within(run, COMMIT_TIMEOUT_S + CONSUMER_STOP_S + SLACK_S, "the stop")
            run.result()
        assert "the next owner reads them again" in caplog.text, caplog.text
        # The commit request given up runs on in aiokafka (shielded) and ends once the broker
        # is back: its end read, not asyncio's ERROR "Task exception was never retrieved"
        # when the task is collected (services.kafka_commit_abandoned).
        requests = await abandoned
        assert requests, "no commit request was sent at the stop: nothing of it to read"
        await asyncio.wait(requests, timeout=60)
        assert all(request.done() for request in requests)
        del requests, abandoned
        gc.collect()
        unread = [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]
        assert unread == [], unread
    finally:
        stop.set()
        handled.set()
        await asyncio.wait_for(run, 60)
        await producer.stop()
    assert unstopped(client_id(role)) == []


# How long a member must have owned its partition, without a gap, before the broker is
# frozen: past one heartbeat (every 2 s, services.kafka_clients), whose answer tells a member
# of a rebalance under way.
STEADY_S = 2.5


async def _owned_steadily(reader: AtLeastOnceConsumer, owned: TopicPartition) -> None:
    loop = asyncio.get_running_loop()
    since: float | None = None
    while since is None or loop.time() - since < STEADY_S:
        if owned not in reader.consumer.assignment():
            since = None
        elif since is None:
            since = loop.time()
        await asyncio.sleep(0.05)


async def _commit_requests_until(run: "asyncio.Task[None]") -> "set[asyncio.Task[Any]]":
    """aiokafka's offset commit requests (GroupCoordinator._do_commit_offsets) seen while
    `run` goes on: held, so that none is collected before the test looks."""
    seen: set[asyncio.Task[Any]] = set()
    while not run.done():
        tasks = asyncio.all_tasks()
        seen |= {t for t in tasks if getattr(t.get_coro(), "__name__", "") == "_do_commit_offsets"}
        await asyncio.sleep(0.01)
    return seen


async def test_a_projectors_lag_marker_the_frozen_broker_never_answers_does_not_hold_its_stop(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The projector, idle, commits its lag marker (the offsets it projected, for operators:
    its position is the database's) between two fetches, to a broker that does not answer,
    and is asked to stop meanwhile. aiokafka retries the commit for as long as the
    coordinator is away, and the loop awaits it before it looks at the stop again."""
    topic = f"{topic_prefix}lag-marker-frozen"
    await create_topic(kafka_broker.bootstrap, topic, 1)
    stop = asyncio.Event()
    projector = Projector(_settings(kafka_broker, topic_prefix), stop)
    # Both of its clients stopped at the end as its run stops them (its dead letters'
    # producer is made with it, and not started here).
    stack = AsyncExitStack()
    stopped_with(stack, projector.dead_letters)
    stopped_with(stack, projector.consumer)
    loop: asyncio.Task[None] | None = None
    try:
        projector.consumer.subscribe([topic])
        await projector.consumer.start()
        owned = TopicPartition(topic, 0)
        async with asyncio.timeout(60):
            while owned not in projector.consumer.assignment():
                await projector.consumer.getmany(timeout_ms=100)
        projector.marker.note({owned: 1})
        with frozen(kafka_broker), caplog.at_level(logging.WARNING):
            loop = asyncio.create_task(projector._loop())
            # Its first fetch comes back empty after 0.5 s; then the commit, unanswered.
            await asyncio.sleep(1.5)
            assert not loop.done(), loop
            stop.set()
            await ended_within(loop, LAG_MARKER_TIMEOUT_S + SLACK_S, "the projector's loop")
            loop.result()
        assert "(lag marker only) failed: no answer in 5 s" in caplog.text, caplog.text
    finally:
        stop.set()
        if loop is not None:
            await asyncio.wait_for(loop, 60)
        await stack.aclose()


@asynccontextmanager
async def _producer_in_flight(
    broker: KafkaBroker, topic_prefix: str, role: str
) -> AsyncIterator[tuple[AIOKafkaProducer, AsyncExitStack, "asyncio.Future[Any]"]]:
    """A producer on a process's exit stack (services.closing.stopped_with) with a record on
    its way to the broker, frozen: the producer, the stack, the record's delivery. The
    stack closed at the end, and nothing of the producer left unstopped."""
    topic = f"{topic_prefix}{role}"
    await create_topic(broker.bootstrap, topic, 1)
    stack = AsyncExitStack()
    producer: AIOKafkaProducer = stopped_with(
        stack, acked_producer(_settings(broker, topic_prefix), role)
    )
    try:
        await producer.start()
        await producer.send_and_wait(topic, b"before")  # the leader known, its connection open
        with frozen(broker):
            sent = await producer.send(topic, b"in flight")
            await asyncio.sleep(0.5)  # the sender has it on the wire
            yield producer, stack, sent
    finally:
        await stack.aclose()
    assert unstopped(client_id(role)) == []


async def test_a_producer_with_records_in_flight_stops_in_bounded_time(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    """A process's exit stack (the projector's, the saga's, the intents reader's, the
    reconciler's and the decider's dispatch producers) stops a producer whose record is on
    its way to the frozen broker. aiokafka's own stop waits for its delivery: the request's
    40 s, then its retries."""
    role = "producer-frozen-at-stop"
    async with _producer_in_flight(kafka_broker, topic_prefix, role) as (producer, stack, sent):
        closing = asyncio.create_task(stack.aclose())
        await ended_within(closing, PRODUCER_STOP_S + SLACK_S, "the producer's stop")
        closing.result()
        assert sent.done(), "a record left waiting on a stopped producer"
        assert not any(conn.connected() for conn in producer.client._conns.values())


async def test_a_producer_stop_whose_caller_is_cancelled_leaves_nothing_running(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    """A caller of stop_producer cancelled while the frozen broker holds the stop (a timeout
    around it, its own task stopped): aiokafka's stop, cancelled after it marked the producer
    closed, left its sender and connections to the loop's end, and no later stop reached
    them."""
    role = "producer-stop-cancelled"
    async with _producer_in_flight(kafka_broker, topic_prefix, role) as (producer, _, sent):
        await cancelled_while_stopping(stop_producer(producer), SLACK_S)
        assert producer._sender.sender_task.done(), "the producer's sender runs on"
        assert sent.done(), "a record left waiting on a stopped producer"
        assert not any(conn.connected() for conn in producer.client._conns.values())
