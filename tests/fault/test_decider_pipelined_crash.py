"""The window the decider's pipeline opens: a partition's Kafka transaction is on the wire
(its records sent, not committed) while a later input of the same partition has already
been decided on that transaction's states and staged for the next one (services.decider.
runtime: the loop never waits for a commit).

The decider is held exactly there (`decider.with_pipelined_inputs`): FIRST's transaction
open, SECOND's command decided and staged. The test proves the window (FIRST's events in an
open transaction only, nothing of SECOND written, not even uncommitted, neither command
committed on the changelog), then either kills the decider (kill -9) and restarts it, or lets
it go on. Either way each command is decided exactly once, in order: the staged decisions
never ride in the transaction before them, and never commit without it.
"""

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from support.crash_support import read_records, start_paused_at, wait_paused
from support.decider_support import (
    changelog_offsets,
    event_types,
    eventually,
    lone_decider,
    produce,
)
from support.txbuilders import submit

from events.topics import Topics
from services.crash_points import DECIDER_WITH_PIPELINED_INPUTS
from services.devtools.stack import Stack
from services.kafka_setup import ensure_topics

PARTITION = 3
FIRST, SECOND = "pipelined-1", "pipelined-2"
DECIDED = ["TransactionAccepted", "OperationDispatched"]


async def _uncommitted(bootstrap: str, topics: Topics, tx_id: str) -> list[str]:
    """The transaction's event types on the log, open transactions' records included."""
    return [
        r.value["type"]
        for r in await read_records(bootstrap, topics.events, "read_uncommitted")
        if r.value["tx_id"] == tx_id
    ]


async def _kill_and_restart(stack: Stack, marker: Path) -> None:
    stack.kill("decider")
    stack.start("decider")


async def _let_go(stack: Stack, marker: Path) -> None:
    await asyncio.to_thread(marker.unlink)


@pytest.mark.parametrize("then", [_kill_and_restart, _let_go], ids=["killed", "let-go"])
async def test_inputs_decided_while_the_transaction_before_them_is_open_are_decided_once(
    kafka_bootstrap: str,
    topic_prefix: str,
    tmp_path: Path,
    then: Callable[[Stack, Path], Awaitable[None]],
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    marker = tmp_path / "paused"
    async with lone_decider(kafka_bootstrap, topic_prefix, tmp_path) as stack:
        start_paused_at(stack, "decider", DECIDER_WITH_PIPELINED_INPUTS, marker)
        await produce(kafka_bootstrap, topics.commands, [submit(["a"], tx_id=FIRST)], PARTITION)

        # SECOND is sent once FIRST's transaction is open (its records on the broker), so it
        # is decided while that transaction is on the wire, not with it.
        async def first_open() -> bool | None:
            return True if await _uncommitted(kafka_bootstrap, topics, FIRST) else None

        await eventually(first_open, "FIRST's transaction is open")
        await produce(kafka_bootstrap, topics.commands, [submit(["a"], tx_id=SECOND)], PARTITION)
        await wait_paused(stack, "decider", marker)

        # Held in the window: FIRST's decisions in the open transaction only, SECOND's
        # decided in memory and nowhere on the log, neither command committed.
        assert await _uncommitted(kafka_bootstrap, topics, FIRST) == DECIDED
        assert await event_types(kafka_bootstrap, topics, FIRST) == []
        assert await _uncommitted(kafka_bootstrap, topics, SECOND) == []
        assert topics.commands not in await changelog_offsets(kafka_bootstrap, topics, PARTITION)

        await then(stack, marker)

        async def both_decided() -> bool | None:
            for tx_id in (FIRST, SECOND):
                if await event_types(kafka_bootstrap, topics, tx_id) != DECIDED:
                    return None
            return True

        await eventually(both_decided, "both commands are decided and committed")
        await asyncio.sleep(1.0)  # a second decision of either would be on the log by now
        # Each command decided once (committed: a killed decider's open transaction stays on
        # the log, aborted), its offset committed with it.
        for tx_id in (FIRST, SECOND):
            assert await event_types(kafka_bootstrap, topics, tx_id) == DECIDED
        offsets = await changelog_offsets(kafka_bootstrap, topics, PARTITION)
        assert offsets[topics.commands] == 2, offsets
