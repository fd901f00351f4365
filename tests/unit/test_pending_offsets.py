"""The one bookkeeping of the group commits (services.pending_offsets.PendingOffsets) and the
three failure policies its callers keep: the decider's lag marker keeps a failed commit's
offsets for the next, the projector's drops them (the next batch carries newer), the
at-least-once consumers raise on a Kafka error (kept pending) and drop on a rebalance."""

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import CommitFailedError, KafkaConnectionError

from services.at_least_once import AtLeastOnceConsumer
from services.config import load_settings
from services.decider.input_offsets import LAG_MARKER_METADATA
from services.decider.lag_marker import INTERVAL_S, LagMarker
from services.pending_offsets import PendingOffsets
from services.projector.runtime import Projector

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class _Consumer:
    """Owns `owned`; each commit is recorded, or raises the next of `errors`."""

    def __init__(self, owned: set[TopicPartition], errors: list[Exception] | None = None) -> None:
        self.owned = owned
        self.errors = errors or []
        self.committed: list[dict[TopicPartition, Any]] = []
        self.gate: asyncio.Event | None = None

    def assignment(self) -> set[TopicPartition]:
        return self.owned

    async def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.errors:
            raise self.errors.pop(0)
        self.committed.append(offsets)


def _pending(consumer: _Consumer, metadata: str = "") -> PendingOffsets:
    return PendingOffsets(consumer, metadata)


async def test_only_owned_partitions_are_committed_and_the_others_dropped() -> None:
    consumer = _Consumer({A0, B0})
    pending = _pending(consumer, "why")
    pending.note({A0: 5, A1: 7, B0: 2})
    assert await pending.commit(only={A0, A1}) == {A0: 5}
    assert consumer.committed == [{A0: (5, "why")}]
    assert pending.offsets == {B0: 2}  # A1 is another member's now; B0 was not asked for
    assert await pending.commit() == {B0: 2} and not pending


async def test_an_offset_noted_during_the_commit_stays_pending() -> None:
    consumer = _Consumer({A0})
    consumer.gate = asyncio.Event()
    pending = _pending(consumer)
    pending.note({A0: 5})
    commit = asyncio.create_task(pending.commit())
    await asyncio.sleep(0)
    pending.note({A0: 9})
    consumer.gate.set()
    assert await commit == {A0: 5}
    assert pending.offsets == {A0: 9}


async def test_a_failed_commit_leaves_its_offsets_pending_and_raises() -> None:
    pending = _pending(_Consumer({A0}, [KafkaConnectionError()]))
    pending.note({A0: 5})
    with pytest.raises(KafkaConnectionError):
        await pending.commit()
    assert pending.offsets == {A0: 5}


async def test_the_interval_counts_from_the_last_commit_that_carried_something() -> None:
    pending = _pending(_Consumer({A0}))
    assert pending.due(60.0)
    pending.note({A1: 3})  # not owned: nothing is sent
    await pending.commit()
    assert pending.due(60.0)
    pending.note({A0: 3})
    await pending.commit()
    assert not pending.due(60.0) and pending.due(0.0)


async def test_a_decider_hand_over_lets_its_partitions_go_even_when_refused() -> None:
    consumer = _Consumer({A0, B0}, [KafkaConnectionError()])
    marker = LagMarker(consumer)
    marker.note({A0: 5, B0: 6})
    await marker.hand_over({1})  # no pending offset of partition 1: nothing sent
    assert consumer.committed == [] and consumer.errors
    await marker.hand_over({0})  # refused: logged, then partition 0 is let go
    assert marker.pending.offsets == {}
    marker.note({A0: 8})
    marker.maybe_send()
    assert marker.task is None  # the refused commit was sent within the interval
    marker.pending.sent_at -= INTERVAL_S
    marker.maybe_send()
    assert marker.task is not None
    await marker.task
    assert consumer.committed == [{A0: (8, LAG_MARKER_METADATA)}]


async def test_the_decider_lag_marker_failure_is_kept_pending_when_not_handing_over() -> None:
    consumer = _Consumer({A0}, [KafkaConnectionError()])
    marker = LagMarker(consumer)
    marker.note({A0: 5})
    marker.maybe_send()
    assert marker.task is not None
    await marker.task
    assert marker.pending.offsets == {A0: 5}


async def test_the_projector_drops_a_failed_lag_marker() -> None:
    projector = Projector(load_settings(), asyncio.Event())
    projector.marker = _pending(_Consumer({A0}, [KafkaConnectionError()]))
    projector.marker.note({A0: 5})
    await projector._commit_lag_marker()
    assert not projector.marker
    # Made, never started: else logged unclosed when collected.
    await projector.consumer.stop()
    await projector.dead_letters.stop()


async def test_the_at_least_once_consumer_keeps_a_failed_commit_and_drops_a_handed_over_one() -> (
    None
):
    consumer = _Consumer({A0, B0}, [KafkaConnectionError(), CommitFailedError()])
    reader = AtLeastOnceConsumer(load_settings(), "g", ["a"], None, role="test", max_records=1)
    reader.pending = _pending(consumer)
    reader.pending.note({A0: 5, B0: 6})
    with pytest.raises(KafkaConnectionError):
        await reader.commit_pending()
    assert reader.pending.offsets == {A0: 5, B0: 6}
    await reader.commit_pending(only={A0})  # the group rebalanced under it
    assert reader.pending.offsets == {B0: 6}
    await reader.consumer.stop()  # made, never started: else logged unclosed when collected
