"""A group consumer whose broker goes down after its start has made its fetcher and group
coordinator waits inside that start for the broker to come back: no error leaves it, so
services.kafka_start never starts the same client a second time (which would end the
process on aiokafka's `assert self._fetcher is None`, "Did you call `start` twice?").

The broker is the session's own, killed at that moment of a real start (the coordinator
being made, the fetcher already there) and started again a few seconds later. Had aiokafka let
a retriable error out there instead, services.kafka_start would have retried it and this test
would fail on that assert (seen with the error raised at the same moment by hand)."""

import asyncio
import logging
import threading
import time
from typing import Any

import aiokafka.consumer.consumer
import pytest
from support.topic_setup import create_topic

from events.topics import Topics
from services.config import Settings
from services.devtools.infra import KafkaBroker
from services.kafka_clients import group_consumer
from services.kafka_start import start_kafka_client

DOWN_S = 3.0


async def test_a_consumer_that_loses_the_broker_after_its_fetcher_exists_waits_in_its_start(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = f"{topic_prefix}lost-after-bootstrap"
    await create_topic(kafka_broker.bootstrap, topic, 2)
    settings = Settings(
        kafka_bootstrap=kafka_broker.bootstrap,
        database_url="",
        topics=Topics(topic_prefix),
        environment="test",
    )
    consumer = group_consumer(settings, "lost-after-bootstrap", "test")
    consumer.subscribe([topic])
    real = aiokafka.consumer.consumer.GroupCoordinator
    # Set as the broker is started again, and once it is ready: the client may join as soon
    # as the new broker answers, before the start's own readiness poll has seen it (a
    # clean-clone CI run), so "waited for the broker" is the first, not the second.
    relaunched, back = threading.Event(), threading.Event()
    killed_with_fetcher: list[bool] = []

    def coordinator(*args: Any, **kwargs: Any) -> Any:
        # The moment the start has bootstrapped, read the topic's metadata and made its
        # fetcher: the broker goes down before the group is joined.
        killed_with_fetcher.append(consumer._fetcher is not None)
        kafka_broker.kill()
        threading.Thread(
            target=_start_after, args=(kafka_broker, relaunched, back), daemon=True
        ).start()
        return real(*args, **kwargs)

    monkeypatch.setattr(aiokafka.consumer.consumer, "GroupCoordinator", coordinator)
    caplog.set_level(logging.WARNING, logger="services.kafka_start")
    try:
        async with asyncio.timeout(90):
            started = await start_kafka_client(consumer, "test consumer", timeout_s=60)
        assert killed_with_fetcher == [True]
        assert relaunched.is_set(), "the start ended while the broker was down"
        assert started
        assert consumer.assignment(), "started without joining its group"
        # aiokafka met the broker down (its coordinator logs each failure) and retried:
        # no failed start of services.kafka_start's.
        assert [r for r in caplog.records if r.name.startswith("aiokafka")]
        retried = [r.getMessage() for r in caplog.records if r.name == "services.kafka_start"]
        assert not retried, "an error left the start"
    finally:
        await consumer.stop()
        await asyncio.to_thread(back.wait, 120)


def _start_after(broker: KafkaBroker, relaunched: threading.Event, back: threading.Event) -> None:
    time.sleep(DOWN_S)
    relaunched.set()
    broker.start()
    back.set()
