"""A Kafka client made at its first use and kept until its owner closes: the intake's group
watch keeps two such readers (services.intake.group_positions' offsets reader and
services.intake.group_progress' gap reader) for the life of the process.

The start and the close share a lock, and a close marks the client closed first. Without
that, a close that ran while a first use was still starting the client found nothing to
stop, and the start then kept its client, unstopped for the life of the process, its
connections and tasks with it (a Kafka client collected unstopped fails the suite:
tests/support/kafka_leaks.py). Now the close waits for that start (bounded by the
client's own request timeout, or cut off when its caller is cancelled) and stops what it
made, and a use after the close is refused instead of making a client nobody stops.
"""

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from services.kafka_clients import start_or_stop, stop_client

Client = TypeVar("Client", AIOKafkaConsumer, AIOKafkaProducer)


class KeptClientClosed(RuntimeError):
    """A kept client asked for after its owner closed it."""


class KeptClient(Generic[Client]):
    def __init__(self, make: Callable[[], Client], name: str) -> None:
        self._make, self._name = make, name
        self._client: Client | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def get(self) -> Client:
        """The client, made and started at the first call (services.kafka_clients.
        start_or_stop: one whose start fails or is cancelled is stopped, and the next call
        makes another); KeptClientClosed once `close` has been called."""
        async with self._lock:
            if self._closed:
                raise KeptClientClosed(f"the {self._name} is closed")
            if self._client is None:
                client = self._make()
                await start_or_stop(client)
                self._client = client
            return self._client

    async def close(self) -> None:
        """Stops the client, after a start running in another task has ended; later `get`
        calls are refused. A second close does nothing."""
        self._closed = True
        async with self._lock:
            client, self._client = self._client, None
            if client is not None:
                await stop_client(client)
