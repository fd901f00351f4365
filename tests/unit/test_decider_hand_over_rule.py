"""Which staged decisions a decider commits before it lets its partitions go (Decider.
hand_over; tests/fault/test_decider_hand_over.py runs it against a real broker): each
partition's, unless its last transaction failed, whose staged decisions were decided on
states that never committed (the next owner decides their inputs again); and none of the
committed dispatches is called here (the next owner's take-over calls them)."""

import asyncio
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from events.topics import Topics
from services.config import Settings
from services.decider.runtime import Decider, OwnedPartition
from services.decider.staged import Staged


class _NoneFinished:
    async def get(self, key: bytes) -> None:
        return None


async def _ends(error: BaseException | None) -> None:
    if error is not None:
        raise error


async def test_only_partitions_whose_last_transaction_did_not_fail_hand_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(
        kafka_bootstrap="127.0.0.1:9", database_url="", topics=Topics(""), environment="test"
    )
    decider = Decider(settings)
    sent: list[tuple[int, bool]] = []

    async def send(self: Decider, partition: int, owned: Any, staged: Any, *, call: bool) -> None:
        sent.append((partition, call))

    monkeypatch.setattr(Decider, "_send", send)
    try:
        for partition, last in [(0, None), (1, KafkaConnectionError()), (2, "none"), (3, None)]:
            owned = OwnedPartition(None, {}, _NoneFinished())  # type: ignore[arg-type]
            owned.staged = Staged(partition)
            if last != "none":
                owned.task = asyncio.create_task(_ends(last))
            decider.owned[partition] = owned
        decider.owned[3].staged = None  # nothing staged: nothing to commit
        await asyncio.gather(
            *(o.task for o in decider.owned.values() if o.task), return_exceptions=True
        )
        await decider.hand_over({0, 1, 2, 3})
        assert sorted(sent) == [(0, False), (2, False)]
        assert decider.owned[1].staged is not None  # left to the drop, forgotten there
    finally:
        await decider.stop_clients()
