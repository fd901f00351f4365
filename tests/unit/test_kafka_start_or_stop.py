"""A client whose start fails or is cancelled is stopped (services.kafka_clients.start_or_stop),
where recon keeps a client only once it has started: the intake's group watch reads
positions (services.intake.group_positions) and gaps (services.intake.group_progress) with
consumers started at their first use. Real aiokafka clients, against an address that refuses
connections and one that accepts and never answers."""

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError
from support.kafka_leaks import unstopped

from events.topics import Topics
from services.config import Settings
from services.intake.group_positions import GroupPositions, Standing
from services.intake.group_progress import GapReader
from services.kafka_clients import client_id

TP = TopicPartition("recon.drift", 0)


@pytest.fixture
def refusing() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def silent() -> Iterator[str]:
    """Accepts connections (the kernel's backlog) and never answers one."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def _settings(bootstrap: str) -> Settings:
    return Settings(
        kafka_bootstrap=bootstrap, database_url="", topics=Topics(""), environment="test"
    )


def _positions(bootstrap: str) -> Callable[[], Awaitable[object]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    positions = GroupPositions(_settings(bootstrap), admin, "intake-watch")
    return lambda: positions.records([TP])


def _gaps(bootstrap: str) -> Callable[[], Awaitable[object]]:
    reader = GapReader(_settings(bootstrap))
    return lambda: reader.read({TP: Standing(0, 1)})


READERS = {"intake-watch": _positions, "intake-progress": _gaps}


@pytest.mark.parametrize("role", READERS)
async def test_a_reader_whose_start_fails_is_stopped(role: str, refusing: str) -> None:
    read = READERS[role](refusing)
    # `failed` holds the failed start's frames, and so its consumer, to the test's end.
    with pytest.raises(KafkaConnectionError) as failed:
        await read()
    assert failed.value.retriable
    assert unstopped(client_id(role)) == []


@pytest.mark.parametrize("role", READERS)
async def test_a_reader_whose_start_is_cancelled_is_stopped(role: str, silent: str) -> None:
    # The watch's own timeout, or the intake stopping, cancels a look mid-start.
    read = asyncio.ensure_future(READERS[role](silent)())
    await asyncio.sleep(0.3)
    assert not read.done()
    read.cancel()
    with pytest.raises(asyncio.CancelledError):
        await read
    assert unstopped(client_id(role)) == []
