"""A real aiokafka client whose start fails part-way, for the tests of what a process stops
when one of its steps fails (services.closing).

The client's real `start()` runs first, against the real broker (its connections, its
metadata task, a producer's sender, a consumer's fetcher and group membership), then it
raises: what aiokafka does when a late step of its start fails (a producer's InitProducerId
refused, a consumer's coordinator lost): the client keeps what it opened. Not retriable,
so services.kafka_start raises it at once instead of trying again."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from services.kafka_clients import client_id


class StartRefused(KafkaError):  # type: ignore[misc]
    retriable = False


def _id(client: Any) -> str:
    inner = client.client if isinstance(client, AIOKafkaProducer) else client._client
    name: str = inner._client_id
    return name


def fail_start(monkeypatch: pytest.MonkeyPatch, role: str) -> None:
    """The start of every client of `role` (services.kafka_clients.client_id) raises
    StartRefused once it has done all its work, for the rest of the test."""
    for kind in (AIOKafkaConsumer, AIOKafkaProducer, AIOKafkaAdminClient):
        real = kind.start

        async def start(self: Any, real: Any = real) -> None:
            await real(self)
            if _id(self) == client_id(role):
                raise StartRefused(f"{client_id(role)}'s start refused by the test")

        monkeypatch.setattr(kind, "start", start)
