"""The at-least-once processes stop every Kafka client they made when the broker refuses at
their start, whether the start gives up on the process's stop or raises (services.closing):
the saga orchestrator (its producer starts first, so its inputs' consumer is made and never
started) and an at-least-once consumer run on its own. Real aiokafka clients, against an
address that refuses connections."""

import asyncio
import socket

import pytest
from support.kafka_leaks import unstopped

from events.topics import Topics
from services.at_least_once import AtLeastOnceConsumer, Batch
from services.config import Settings
from services.kafka_clients import client_id
from services.saga.runtime import Orchestrator


@pytest.fixture
def settings() -> Settings:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        refusing = f"127.0.0.1:{sock.getsockname()[1]}"
    return Settings(
        kafka_bootstrap=refusing, database_url="", topics=Topics(""), environment="test"
    )


def _stopped() -> asyncio.Event:
    """A process told to stop: a start that failed once gives up instead of retrying."""
    stop = asyncio.Event()
    stop.set()
    return stop


def _left_open(*roles: str) -> dict[str, int]:
    return {role: n for role in roles if (n := len(unstopped(client_id(role))))}


async def test_a_saga_stopped_while_the_broker_refuses_stops_both_clients(
    settings: Settings,
) -> None:
    saga = Orchestrator(settings)
    await saga.run(_stopped())
    assert _left_open("saga-producer", "saga-inputs") == {}


async def _ignore(batch: Batch) -> None:
    raise AssertionError("no batch can be read from a broker that refuses")


async def test_an_at_least_once_consumer_stopped_before_it_started_is_stopped(
    settings: Settings,
) -> None:
    consumer = AtLeastOnceConsumer(settings, "g", ["t"], None, role="test", max_records=1)
    await consumer.run(_stopped(), _ignore)
    assert _left_open("test") == {}
