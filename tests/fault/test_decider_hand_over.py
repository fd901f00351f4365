"""A decider lets a partition go (a rebalance takes it, or the process stops cleanly) while
decisions of it are staged (group commit): it commits them first (Decider.hand_over).

The staged decision here is an answer of the decider's own call (a notification's, which
nobody waits for: services.decider.group_commit.nobody_waits), decided inline. Nothing else
holds it: forgotten at the hand-over, the next owner's take-over would ask the provider again
(a lookup; for a provider that cannot be asked, a person). The deciders run in this process
against a real broker, their calls off: the answer is handed to the first one as its
dispatch host would, and its staged batch is held (its start put an hour off) so that the
hand-over, not the group commit's wait, is what commits it. Without the hand-over the answer
never reaches the log."""

import asyncio
import gc
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from support.broker_faults import frozen
from support.decider_support import event_types, eventually, in_process, produce
from support.stop_timing import ended_within
from support.topic_records import read_records
from support.txbuilders import observed, submit

from events.inputs import Outcome
from events.topics import Topics
from services.config import Settings
from services.decider.dispatch_host import Answer
from services.decider.lag_marker import HANDOVER_TIMEOUT_S
from services.decider.runtime import HAND_OVER_S, Decider, OwnedPartition
from services.devtools.infra import KafkaBroker
from services.inline_answers import INLINE
from services.kafka_clients import CONSUMER_STOP_S

PARTITION = 1
TX = "hand-over-1"
RECEIPT = observed("receipt", 1, Outcome.SUCCEEDED, tx_id=TX)


@pytest.mark.timeout(180)
async def test_a_staged_answer_is_committed_before_a_rebalance_lets_its_partition_go(
    kafka_bootstrap: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = Topics(topic_prefix)
    async with _staged_receipt(kafka_bootstrap, topics, monkeypatch) as (settings, _, _):
        joined = asyncio.Event()
        joining = asyncio.create_task(Decider(settings).run(joined))
        try:
            await _receipt_once_on_the_log(kafka_bootstrap, topics, "after the rebalance")
        finally:
            joined.set()
            await asyncio.wait_for(joining, 60)


@pytest.mark.timeout(180)
async def test_a_staged_answer_is_committed_before_a_clean_stop(
    kafka_bootstrap: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = Topics(topic_prefix)
    async with _staged_receipt(kafka_bootstrap, topics, monkeypatch) as (_, stop, _):
        stop.set()  # the context waits for the decider to end
    await _receipt_once_on_the_log(kafka_bootstrap, topics, "after the clean stop")


# The hand-over's bound; then the group's lag marker (the commit on its way, then the last)
# while the partitions' producers stop; then the inputs' consumer; a few seconds of slack.
FROZEN_STOP_BOUND_S = HAND_OVER_S + 2 * HANDOVER_TIMEOUT_S + CONSUMER_STOP_S + 5.0


@pytest.mark.timeout(240)
async def test_a_clean_stop_the_frozen_broker_never_answers_gives_the_hand_over_up(
    kafka_broker: KafkaBroker, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same staged answer, the broker frozen (SIGSTOP) as the decider is asked to stop:
    the hand-over's transaction is sent and never answered, and its abort waits for the
    producer's sender, shielded from the cancel that ends the hand-over's wait. Given up in
    bounded time, as a crash would leave it: the partition's next owner decides the inputs
    again, and its take-over asks the provider for the call's outcome."""
    topics = Topics(topic_prefix)
    async with _staged_receipt(kafka_broker.bootstrap, topics, monkeypatch) as (_, stop, run):
        with frozen(kafka_broker):
            stop.set()
            await ended_within(run, FROZEN_STOP_BOUND_S, "the decider's stop")
            run.result()


@asynccontextmanager
async def _staged_receipt(
    bootstrap: str, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Settings, asyncio.Event, "asyncio.Task[None]"]]:
    """A decider running with TX committed and the receipt's answer staged, held there."""
    settings = await in_process(bootstrap, topics)
    held: set[int] = set()
    start_at = Decider._start_at

    def holding(self: Decider, owned: OwnedPartition, busy: set[int]) -> float:
        assert owned.staged is not None
        if owned.staged.partition in held:
            return time.monotonic() + 3600
        return start_at(self, owned, busy)

    monkeypatch.setattr(Decider, "_start_at", holding)
    await produce(bootstrap, topics.commands, [submit(["a"], ("receipt",), tx_id=TX)], PARTITION)
    stop = asyncio.Event()
    decider = Decider(settings)
    running = asyncio.create_task(decider.run(stop))
    try:

        async def has(event_type: str) -> bool:
            return event_type in await event_types(bootstrap, topics, TX)

        await eventually(lambda: has("OperationDispatched"), f"{TX}'s step dispatched")
        step = observed("a", 1, Outcome.SUCCEEDED, tx_id=TX)
        await produce(bootstrap, topics.observations, [step], PARTITION)
        await eventually(lambda: has("TransactionCommitted"), f"{TX} committed")

        held.add(PARTITION)
        decider._answered(Answer(PARTITION, RECEIPT, None))

        async def staged() -> bool:
            owned = decider.owned.get(PARTITION)
            return owned is not None and owned.staged is not None

        await eventually(staged, "the receipt's answer staged")
        await asyncio.sleep(1.0)  # past the group commit's own wait (100 ms): still staged
        assert await staged() and await _confirmed(bootstrap, topics) is None
        yield settings, stop, running
    finally:
        stop.set()
        await asyncio.wait_for(running, 60)
        gc.collect()  # aiokafka's futures of dropped producers, collected here


async def _receipt_once_on_the_log(bootstrap: str, topics: Topics, when: str) -> None:
    """The receipt's answer decided once: its event and its observation, written inline."""
    confirmed = await eventually(
        lambda: _confirmed(bootstrap, topics), f"the receipt's answer on the log {when}", 90
    )
    await asyncio.sleep(1.0)  # a second decision of it would be on the log by now
    assert confirmed == await _confirmed(bootstrap, topics) == 1
    answers = [
        r
        for r in await read_records(bootstrap, topics.observations)
        if r.value is not None and json.loads(r.value)["message_id"] == RECEIPT.message_id
    ]
    assert len(answers) == 1, answers
    assert answers[0].headers.get(INLINE) == b"decider"  # decided where it was written


async def _confirmed(bootstrap: str, topics: Topics) -> int | None:
    """How many OperationConfirmed of the receipt are on the log, once there is one."""
    confirmed = [
        event
        for r in await read_records(bootstrap, topics.events)
        if r.value is not None
        and (event := json.loads(r.value))["tx_id"] == TX
        and event["type"] == "OperationConfirmed"
        and event["data"]["action"] == "receipt"
    ]
    return len(confirmed) or None
