"""A decider killed (kill -9) or frozen (SIGSTOP) inside an open Kafka transaction.

Both tests hold the decider at the one point that matters: its events, its new state and its
consumed offsets are written to Kafka inside a transaction that is not committed yet. Reading
the topic with read_uncommitted proves the transaction was open (the records are there, and
read_committed readers do not see them) before the decider is crashed or frozen.
"""

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

from support.crash_support import (
    Record,
    last_stable_offset,
    read_records,
    start_paused_at,
    wait_for_log,
    wait_paused,
)
from support.recon_client import Recon, op, transaction
from support.tests_support_log import read_event_log

from events.topics import Topics
from services.crash_points import DECIDER_IN_OPEN_TRANSACTION
from services.devtools.infra._process import signal_group
from services.devtools.stack import Stack


async def _open_transaction_of(stack: Stack, tx_id: str) -> list[Record]:
    """The records of `tx_id` that the held decider wrote, proven uncommitted."""
    topic = Topics(stack.topic_prefix).events
    written = [
        r
        for r in await read_records(stack.kafka_bootstrap, topic, "read_uncommitted")
        if r.value["tx_id"] == tx_id
    ]
    assert written, "the held decider wrote nothing to Kafka before its pause point"
    [partition] = {r.partition for r in written}
    # The transaction is open: read_committed readers stop before its first record.
    assert await last_stable_offset(stack.kafka_bootstrap, topic, partition) <= min(
        r.offset for r in written
    )
    committed = await read_records(stack.kafka_bootstrap, topic)
    assert not [r for r in committed if r.value["tx_id"] == tx_id]
    return written


async def _assert_decided_once(stack: Stack, recon: Recon, tx_id: str, held: list[Record]) -> None:
    """The held transaction's records were aborted, its successor's committed once, and no
    provider call was made twice."""
    log = await read_event_log(stack)  # verifies every hash chain on the way
    envelopes = log[("demo", tx_id)]
    assert [e.seq for e in envelopes] == list(range(1, len(envelopes) + 1))
    committed = {
        (r.partition, r.offset)
        for r in await read_records(stack.kafka_bootstrap, Topics(stack.topic_prefix).events)
    }
    assert not committed & {(r.partition, r.offset) for r in held}, "a held record was committed"
    tx = (await recon.get(tx_id)).json()
    for action in ("reserve", "charge", "receipt"):
        await recon.assert_applied_once(op(tx, action)["op_key"])


async def test_decider_killed_inside_an_open_transaction(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    marker = tmp_path / "paused"
    start_paused_at(stack, "decider", DECIDER_IN_OPEN_TRANSACTION, marker)
    assert (await recon.submit(transaction("held-1"))).status_code == 202
    await wait_paused(stack, "decider", marker)
    held = await _open_transaction_of(stack, "held-1")

    stack.kill("decider")
    stack.start("decider")
    tx = await recon.wait_terminal("held-1", timeout=90)
    assert tx["status"] == "committed", tx
    await _assert_decided_once(stack, recon, "held-1", held)


async def test_frozen_decider_wakes_up_fenced_after_a_successor_took_over(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    marker = tmp_path / "paused"
    start_paused_at(stack, "decider", DECIDER_IN_OPEN_TRANSACTION, marker)
    assert (await recon.submit(transaction("zombie-1"))).status_code == 202
    await wait_paused(stack, "decider", marker)
    held = await _open_transaction_of(stack, "zombie-1")
    [partition] = {r.partition for r in held}

    # Frozen, not dead: a long GC pause or a suspended VM. Its group session expires and a
    # successor takes its partitions while its transaction is still open.
    zombie = stack.processes["decider"]
    signal_group(zombie, signal.SIGSTOP)
    try:
        stack.start("decider", instance="-2")
        await wait_for_log(stack, "decider-2", f"took partition {partition} ", timeout=60)
        # The successor has decided the same commands again, in its own transaction: now two
        # copies of the transaction's first events exist in the log.
        topic = Topics(stack.topic_prefix).events
        first_event = held[0].value["event_id"]
        await _wait_until(
            lambda records: sum(r.value["event_id"] == first_event for r in records) >= 2,
            stack,
            topic,
        )
    finally:
        # The zombie wakes up and carries on from where it stood: it commits.
        marker.unlink(missing_ok=True)
        signal_group(zombie, signal.SIGCONT)

    # Barrier: the zombie's transaction is over (aborted by the successor's fencing, or, were
    # it not fenced, committed), so read_committed readers have passed all of it.
    end = max(r.offset for r in held) + 1
    await _wait_for_stable(stack, topic, partition, end)
    tx = await recon.wait_terminal("zombie-1", timeout=90)
    assert tx["status"] == "committed", tx
    await _assert_decided_once(stack, recon, "zombie-1", held)
    await wait_for_log(stack, "decider", f"fenced on partition {partition}", timeout=30)


async def _wait_until(
    check: Callable[[list[Record]], bool], stack: Stack, topic: str, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not check(await read_records(stack.kafka_bootstrap, topic, "read_uncommitted")):
        assert time.monotonic() < deadline, "the successor never decided the commands again"
        await asyncio.sleep(0.2)


async def _wait_for_stable(
    stack: Stack, topic: str, partition: int, offset: int, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while await last_stable_offset(stack.kafka_bootstrap, topic, partition) < offset:
        assert time.monotonic() < deadline, "the zombie's transaction never ended"
        await asyncio.sleep(0.2)
