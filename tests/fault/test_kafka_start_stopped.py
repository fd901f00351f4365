"""A process asked to stop while a Kafka client of its waits inside its start for a broker
stops at once, its start given up (services.kafka_start races it with the stop), and leaves
that client stopped.

The broker is the session's own, at two moments of a real group consumer's start:
- frozen (SIGSTOP) before the start: it takes the bootstrap's connection and answers nothing,
  as a hung broker or one behind a firewall that drops packets does, and aiokafka waits for
  the request's timeout (40 s) an attempt;
- killed once the start has made its fetcher and group coordinator: aiokafka looks for the
  group's coordinator until the broker is back, inside the start (the wait
  tests/fault/test_kafka_lost_after_consumer_bootstrap.py keeps).
A broker down before the start (a port nothing listens on) refuses the bootstrap at once: no
start waits in it, and the stop was always seen between the attempts
(tests/unit/test_kafka_start.py)."""

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

import aiokafka.consumer.consumer
import pytest
from support.broker_faults import frozen
from support.kafka_leaks import unstopped
from support.stop_timing import stopped_while_waiting
from support.topic_setup import create_topic

from events.topics import Topics
from services.at_least_once import AtLeastOnceConsumer, Batch
from services.config import Settings
from services.devtools.infra import KafkaBroker
from services.kafka_clients import acked_producer, client_id

pytestmark = pytest.mark.timeout(120)

# A stop's bound: the cancelled start and the consumer's stop take a few ms; a start
# left to itself waits out the frozen broker's 40 s request, the killed one's return.
STOP_BOUND_S = 5.0
ROLE = "broker-away-at-start"


@contextmanager
def _down(broker: KafkaBroker) -> Iterator[None]:
    broker.kill()
    try:
        yield
    finally:
        broker.start()


@pytest.mark.parametrize(
    ("moment", "fault"), [("bootstrap", frozen), ("group join", _down)], ids=["frozen", "down"]
)
async def test_a_consumer_stopped_while_its_start_waits_for_the_broker_stops_at_once(
    moment: str,
    fault: Callable[[KafkaBroker], AbstractContextManager[None]],
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bootstrap, topic = kafka_broker.bootstrap, f"{topic_prefix}broker-away-at-start"
    await create_topic(bootstrap, topic, 2)
    settings = Settings(
        kafka_bootstrap=bootstrap, database_url="", topics=Topics(topic_prefix), environment="test"
    )
    producer = acked_producer(settings, f"{ROLE}-dead-letters")  # never started
    consumer = AtLeastOnceConsumer(settings, ROLE, [topic], producer, role=ROLE, max_records=10)
    stop = asyncio.Event()
    away = asyncio.Event()
    with ExitStack() as back:
        if moment == "bootstrap":
            back.enter_context(fault(kafka_broker))
            away.set()
        else:
            real = aiokafka.consumer.consumer.GroupCoordinator

            def coordinator(*args: Any, **kwargs: Any) -> Any:
                # Bootstrapped, the topic's metadata read, the fetcher made: the group's
                # coordinator is looked for and joined next, from the broker now away.
                assert consumer.consumer._fetcher is not None
                back.enter_context(fault(kafka_broker))
                away.set()
                return real(*args, **kwargs)

            monkeypatch.setattr(aiokafka.consumer.consumer, "GroupCoordinator", coordinator)
        run = asyncio.create_task(consumer.run(stop, _ignore))
        try:
            await stopped_while_waiting(run, stop, away, STOP_BOUND_S, moment)
            assert run.result() is None
            assert not consumer.consumer.assignment()
        finally:
            stop.set()
            await asyncio.to_thread(back.close)  # the broker back (a start takes seconds)
            await asyncio.wait_for(run, 60)
            await producer.stop()
    assert unstopped(client_id(ROLE)) == []


async def _ignore(batch: Batch) -> None:
    pass
