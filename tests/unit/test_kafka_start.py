"""Starting a Kafka client: what is waited out and what stops the process
(services.kafka_start). The transient case against a real broker is
tests/fault/test_kafka_unreachable_at_start.py."""

import asyncio
import socket

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, UnsupportedVersionError

from services.kafka_start import start_kafka_client


def _refusing_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


class _Refused:
    """A client whose start is refused for good (a broker that does not speak our protocol
    version, say): nothing to wait for."""

    def __init__(self) -> None:
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1
        raise UnsupportedVersionError()


async def test_a_refusal_that_will_not_pass_is_raised_at_once() -> None:
    client = _Refused()
    with pytest.raises(UnsupportedVersionError):
        await start_kafka_client(client, "test client", timeout_s=30)
    assert client.starts == 1


async def test_an_address_nothing_answers_on_is_raised_after_the_deadline() -> None:
    producer = AIOKafkaProducer(bootstrap_servers=_refusing_address())
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(KafkaConnectionError):
            await start_kafka_client(producer, "test producer", timeout_s=1.0)
    finally:
        await producer.stop()
    # Retried (not raised on the first refusal), and given up near the deadline.
    assert 0.5 <= loop.time() - started < 5


async def test_a_stop_while_waiting_returns_without_starting() -> None:
    producer = AIOKafkaProducer(bootstrap_servers=_refusing_address())
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, stop.set)
    try:
        assert await start_kafka_client(producer, "test producer", stop, timeout_s=30) is False
    finally:
        await producer.stop()
