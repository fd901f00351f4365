"""Staged evidence waits the longest interval while a call of its partition is in flight
(services.decider.group_commit.interval's `answer_coming`, DispatchHost.calling): the
call's answer opens the partition's next transaction and carries it, instead of the
evidence committing alone as the answer comes and holding it behind that transaction.
And when all of it adds to transactions already finished (`only_finished`, Staged.live):
a webhook a provider sent seconds late, which nothing reads to move on."""

import asyncio
import time
from types import SimpleNamespace

import pytest

from events.topics import Topics
from services.config import Settings
from services.decider.group_commit import MAX_STRETCH
from services.decider.runtime import Decider, OwnedPartition
from services.decider.staged import Staged

TOPICS = Topics("")


class _NoneFinished:
    async def get(self, key: bytes) -> None:
        return None


class _HeldCall:
    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def run(self, order: object) -> None:
        await self.release.wait()


async def test_evidence_waits_for_the_answer_of_a_call_in_flight() -> None:
    decider = Decider(
        Settings(kafka_bootstrap="127.0.0.1:9", database_url="", topics=TOPICS, environment="test")
    )
    try:
        idle = decider.group_commit_s
        assert idle > 0
        owned = OwnedPartition(None, {}, _NoneFinished())  # type: ignore[arg-type]
        # A webhook's evidence for a transaction still running.
        staged = owned.staged = Staged(0, urgent=False, live=True)
        decider.owned = {0: owned}
        assert decider._start_at(owned, set()) == pytest.approx(staged.since + idle)

        call = decider.host.executor = _HeldCall()  # type: ignore[assignment]
        decider.host.enabled = True
        decider.host.submit([SimpleNamespace(leg_key=("t", "k", "forward", 1), partition=0)])  # type: ignore[list-item]
        await asyncio.sleep(0)
        start = decider._start_at(owned, set())
        assert start == pytest.approx(staged.since + idle * MAX_STRETCH)
        assert start > time.monotonic()

        call.release.set()  # answered (or failed): back to the idle interval
        while decider.host.tasks:
            await asyncio.sleep(0)
        assert decider._start_at(owned, set()) == pytest.approx(staged.since + idle)
    finally:
        await decider.stop_clients()


async def test_evidence_for_finished_transactions_waits_the_longest() -> None:
    decider = Decider(
        Settings(kafka_bootstrap="127.0.0.1:9", database_url="", topics=TOPICS, environment="test")
    )
    try:
        idle = decider.group_commit_s
        owned = OwnedPartition(None, {}, _NoneFinished())  # type: ignore[arg-type]
        # Late webhooks of transactions that had ended: nothing else staged.
        staged = owned.staged = Staged(0, urgent=False, live=False)
        decider.owned = {0: owned}
        assert decider._start_at(owned, set()) == pytest.approx(staged.since + idle * MAX_STRETCH)
        staged.live = True  # one more decision, for a transaction still running
        assert decider._start_at(owned, set()) == pytest.approx(staged.since + idle)
    finally:
        await decider.stop_clients()
