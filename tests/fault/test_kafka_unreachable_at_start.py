"""An at-least-once process (the saga orchestrator) whose broker is unreachable when its Kafka
clients start (a broker restarting right after topic set-up, found by `make chaos`) waits for
it instead of exiting.

The broker is the session's real one; its bootstrap address is a port that refuses
connections until the test opens a relay to the broker there (the broker's own advertised
address is used for everything after the bootstrap, as with any Kafka client)."""

import asyncio
import contextlib
import logging
from collections.abc import Callable

import pytest
from conftest import Infra
from support.relay import relay

from events.topics import Topics
from services.at_least_once import AtLeastOnceConsumer, Batch
from services.config import Settings
from services.kafka_setup import ensure_topics
from services.saga.runtime import Orchestrator


async def test_a_saga_started_while_the_broker_is_unreachable_waits_for_it(
    infra: Infra,
    topic_prefix: str,
    free_port: Callable[[], int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(infra.kafka_bootstrap, topics)
    port = free_port()
    settings = Settings(
        kafka_bootstrap=f"127.0.0.1:{port}",
        database_url=infra.database_url,
        topics=topics,
        environment="test",
    )
    saga = Orchestrator(settings)
    # The saga starts its producer first, so its group consumer would only ever start
    # with the broker back; a consumer of the same policy is started on its
    # own beside it, so both kinds of start meet the broker down.
    consumer = AtLeastOnceConsumer(
        settings, "unreachable", [topics.events], saga.producer, role="test", max_records=10
    )
    stop = asyncio.Event()
    caplog.set_level(logging.WARNING, logger="services.kafka_start")
    running = asyncio.gather(saga.run(stop), consumer.run(stop, _ignore))

    def failed_starts() -> set[str]:
        return {
            what
            for what in ("saga producer", "consumer")
            for r in caplog.records
            if r.getMessage().startswith(f"Kafka {what}") and "not reachable yet" in r.getMessage()
        }

    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        # The broker is "down": each start fails at least once, and nothing exits.
        while failed_starts() != {"saga producer", "consumer"}:
            assert not running.done(), running.exception()
            assert loop.time() < deadline, f"only these starts failed: {failed_starts()}"
            await asyncio.sleep(0.05)
        async with relay(port, infra.kafka_bootstrap):
            # The broker "comes back": producer and group consumers start and take their
            # partitions.
            while not (saga.inputs.consumer.assignment() and consumer.consumer.assignment()):
                assert not running.done(), running.exception()
                assert loop.time() < deadline + 30, "a consumer never joined its group"
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(running, 15)
    finally:
        stop.set()
        if not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await running


async def _ignore(batch: Batch) -> None:
    pass
