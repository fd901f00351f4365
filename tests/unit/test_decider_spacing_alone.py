"""A partition's decision that matters waits only for the broker's markers after a slow
transaction when no other partition has one staged or on the wire, nor a call in flight, or
when the partition holds no live transaction but those the decision carries
(services.decider.group_commit.spacing_bound, Decider._start_at): at concurrency 1 nothing
arrives to ride with it, and the full spacing put tens of milliseconds on a provider
answer's path; at concurrency 30 other partitions always have work and every partition
other live transactions, and it gathers inputs."""

import time

import pytest

from events.topics import Topics
from services.config import Settings
from services.decider.group_commit import IDLE_SPACING_S, SPACING
from services.decider.runtime import Decider, OwnedPartition
from services.decider.staged import Staged
from transactions.transaction import initial_state

TOPICS = Topics("")


class _NoneFinished:
    async def get(self, key: bytes) -> None:
        return None


def _owned(partition: int, *, urgent: bool) -> OwnedPartition:
    owned = OwnedPartition(None, {}, _NoneFinished())  # type: ignore[arg-type]
    owned.staged = Staged(partition, urgent=urgent)
    return owned


def _decider() -> Decider:
    return Decider(
        Settings(kafka_bootstrap="127.0.0.1:9", database_url="", topics=TOPICS, environment="test")
    )


def _live(owned: OwnedPartition, tx_id: str, *, staged: bool) -> None:
    """A live transaction of the partition, its latest decision staged or not."""
    state = initial_state("t", tx_id)
    owned.states[("t", tx_id)] = state
    if staged:
        assert owned.staged is not None
        owned.staged.changes[("t", tx_id)] = state


async def test_after_a_slow_transaction_a_partition_alone_waits_only_for_the_markers() -> None:
    decider = _decider()
    try:
        answered = _owned(0, urgent=True)  # a provider's answer, decided
        _live(answered, "tx-answered", staged=True)
        _live(answered, "tx-other", staged=False)  # another live transaction there
        answered.ended_at, answered.took_s = time.monotonic(), 0.2  # a loaded broker
        elsewhere = _owned(1, urgent=False)  # a webhook's evidence, staged on another
        decider.owned = {0: answered, 1: elsewhere}
        decider.fetched = 1
        start = decider._start_at(answered, decider._busy_partitions())
        assert start == pytest.approx(answered.ended_at + IDLE_SPACING_S)

        # Another partition's decision that matters on the wire: the full spacing, as before.
        elsewhere.committing, elsewhere.staged = Staged(1, urgent=True), None
        start = decider._start_at(answered, decider._busy_partitions())
        assert start == pytest.approx(answered.ended_at + SPACING * 0.2)
        # Or staged there.
        elsewhere.committing, elsewhere.staged = None, Staged(1, urgent=True)
        start = decider._start_at(answered, decider._busy_partitions())
        assert start == pytest.approx(answered.ended_at + SPACING * 0.2)
        # Or a call in flight there, whose answer will be one.
        elsewhere.staged = Staged(1, urgent=False)
        decider.host.calling[1] = 1
        start = decider._start_at(answered, decider._busy_partitions())
        assert start == pytest.approx(answered.ended_at + SPACING * 0.2)
        decider.host.calling[1] = 0
        start = decider._start_at(answered, decider._busy_partitions())
        assert start == pytest.approx(answered.ended_at + IDLE_SPACING_S)
    finally:
        await decider.stop_clients()


async def test_a_partition_with_no_other_live_transaction_waits_only_for_the_markers() -> None:
    """At concurrency 1 the previous transaction's receipt (its call in flight, or its
    answer's transaction on the wire) is on another partition as the next transaction's
    steps are decided: nothing of it can ride with them."""
    decider = _decider()
    try:
        answered = _owned(0, urgent=True)
        answered.ended_at, answered.took_s = time.monotonic(), 0.2
        _live(answered, "tx-next", staged=True)
        receipt = _owned(1, urgent=False)
        receipt.committing, receipt.staged = Staged(1, urgent=True), None
        decider.owned = {0: answered, 1: receipt}
        decider.host.calling[1] = 1
        decider.fetched = 1
        start = decider._start_at(answered, decider._busy_partitions())
        assert start == pytest.approx(answered.ended_at + IDLE_SPACING_S)

        # Another live transaction on the partition itself: its inputs may come, the full
        # spacing gathers them.
        _live(answered, "tx-previous", staged=False)
        start = decider._start_at(answered, decider._busy_partitions())
        assert start == pytest.approx(answered.ended_at + SPACING * 0.2)

        # A backlog is load whatever lives where: the full spacing.
        del answered.states[("t", "tx-previous")]
        decider.fetched = 50
        start = decider._start_at(answered, decider._busy_partitions())
        assert start == pytest.approx(answered.ended_at + SPACING * 0.2)
    finally:
        await decider.stop_clients()
