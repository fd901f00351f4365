"""A take whose call fence the database refuses warns an operator only when another holder's
fence is newer (DispatchHost.fenced): a later take by another process, or a Kafka cluster that
reached the database later. This process's own retake, whose fence landed before the first
take's, is nothing to act on: the first write is refused and no one is told."""

import asyncio
import logging

import pytest

from events.topics import Topics
from services.config import Settings
from services.decider.dispatch_host import DispatchHost
from services.dispatcher.call_fence import Fence

CLUSTER = "a-cluster"
FIRST = Fence("recon-decider-0", 7, 1, CLUSTER)
RETAKE = Fence("recon-decider-0", 7, 2, CLUSTER)


class _Gate:
    """Records fences as the database does (a write only moves forward); each write waits
    until the test lets it through, so the test orders them."""

    def __init__(self) -> None:
        self.newest: Fence | None = None
        self.through: dict[Fence, asyncio.Event] = {}

    async def write_fence(self, fence: Fence) -> bool:
        await self.through.setdefault(fence, asyncio.Event()).wait()
        if self.newest is not None and not self.newest < fence:
            return False
        self.newest = fence
        return True


def _host() -> tuple[DispatchHost, _Gate]:
    settings = Settings(
        kafka_bootstrap="127.0.0.1:9", database_url="", topics=Topics(""), environment="test"
    )
    host = DispatchHost(settings, lambda: {0}, lambda _a: None, lambda _p, _t, _k: None)
    gate = host.gate = _Gate()  # type: ignore[assignment]
    return host, gate


async def _written(host: DispatchHost, gate: _Gate, *order: Fence) -> None:
    for fence in order:
        gate.through.setdefault(fence, asyncio.Event()).set()
        await asyncio.sleep(0.01)
    while host.tasks:
        await asyncio.sleep(0.01)


async def test_a_retake_whose_fence_landed_first_warns_no_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host, gate = _host()
    with caplog.at_level(logging.WARNING):
        host.fenced(0, FIRST)
        host.fenced(0, RETAKE)
        await _written(host, gate, RETAKE, FIRST)  # the retake's write lands first
    await host.producer.stop()  # made, never started: else logged unclosed when collected
    assert gate.newest == RETAKE
    assert "newer call fence" not in caplog.text


async def test_a_take_another_holder_superseded_warns(caplog: pytest.LogCaptureFixture) -> None:
    host, gate = _host()
    gate.newest = Fence("recon-decider-0", 9, 0, CLUSTER)  # another process's later take
    with caplog.at_level(logging.WARNING):
        host.fenced(0, FIRST)
        await _written(host, gate, FIRST)
    await host.producer.stop()
    assert "newer call fence" in caplog.text
