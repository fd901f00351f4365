"""A Kafka consumer made at its first use and kept until its owner closes: the intake's group
watch keeps two such readers (services.intake.group_positions' offsets reader and
services.intake.group_progress' gap reader) for the life of the process.

The start and the close share a lock, and a close marks the consumer closed first. Without
that, a close that ran while a first use was still starting the consumer found nothing to
stop, and the start then kept its consumer, unstopped for the life of the process, its
connections and tasks with it (a Kafka client collected unstopped fails the suite:
tests/support/kafka_leaks.py). Now the close waits for that start (bounded by the
consumer's own request timeout, or cut off when its caller is cancelled) and stops what it
made, and a use after the close is refused instead of making a consumer nobody stops.
"""

import asyncio
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer

from services.kafka_clients import start_or_stop, stop_consumer


class KeptConsumerClosed(RuntimeError):
    """A kept consumer asked for after its owner closed it."""


class KeptConsumer:
    def __init__(self, make: Callable[[], AIOKafkaConsumer], name: str) -> None:
        self._make, self._name = make, name
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def get(self) -> AIOKafkaConsumer:
        """The consumer, made and started at the first call (services.kafka_clients.
        start_or_stop: one whose start fails or is cancelled is stopped, and the next call
        makes another); KeptConsumerClosed once `close` has been called."""
        async with self._lock:
            if self._closed:
                raise KeptConsumerClosed(f"the {self._name} is closed")
            if self._consumer is None:
                consumer = self._make()
                await start_or_stop(consumer)
                self._consumer = consumer
            return self._consumer

    async def close(self) -> None:
        """Stops the consumer, after a start running in another task has ended; later `get`
        calls are refused. A second close does nothing."""
        self._closed = True
        async with self._lock:
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                await stop_consumer(consumer)
