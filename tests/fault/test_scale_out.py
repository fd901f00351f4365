"""Two deciders on one machine (each calling the providers of what it dispatches): they share
the 4 partitions (each owns a non-empty share, no partition is owned twice) and every promise
holds; then one leaves mid-run, by SIGTERM or by kill -9, the survivor takes over every
partition (and the calls the leaver had in flight), and everything still settles once.

Ownership is read twice: from the group coordinator (what each member was assigned) and,
for the deciders, from their own logs (what each took and dropped), so a decider that
holds a partition the group gave to another is seen even if the group looks right. Run
with the second decider in a group of its own (so both own every partition), the test
fails on ownership; with the ownership checks removed as well, it still fails, on a stall
(same transactional ids: the first decider is fenced off partitions its group still gives
it) or on a second provider call under one key (its own transactional ids: both write).
"""

import asyncio
import itertools
import re
from datetime import datetime
from typing import Any

import pytest
from support.compensation_support import compensation_op_key, failing_third_step, time_of
from support.crash_support import wait_for_log
from support.recon_client import Recon, effects_for, op, transaction
from support.tests_support_log import read_event_log
from support.topic_records import read_records

from events.keys import partition_key
from events.topics import PARTITIONS, Topics
from services.devtools.consumer_groups import GroupView, wait_spread
from services.devtools.stack import Stack
from services.devtools.synthetic_log import partition_of

ALL = frozenset(range(PARTITIONS))
LEAVING = ("decider-2",)
STAYING = ("decider",)
_TOOK = re.compile(r"(took|dropped) partition (\d+)\b")
_LIVE = re.compile(r"took partition \d+ with \d+ transactions \((\d+) live")


@pytest.mark.parametrize("leave", ["sigterm", "kill-9"])
async def test_two_deciders_share_partitions_and_the_survivor_takes_over(
    stack: Stack, recon: Recon, leave: str
) -> None:
    stack.start("decider", instance="-2")
    await stack.wait_ready()
    topics = Topics(stack.topic_prefix)
    (deciders,) = await wait_spread(stack.kafka_bootstrap, _groups(stack), 2)
    _assert_deciders_own_both_inputs_together(deciders, topics)
    shares = await _decider_shares(stack, ("decider", "decider-2"), deciders)
    assert shares["decider"].isdisjoint(shares["decider-2"]), shares
    assert shares["decider"] | shares["decider-2"] == ALL, shares

    # Slow provider calls keep dispatches in flight when one leaves.
    await recon.arm("payments.charge", "delay", times=1000, delay_ms=300)
    committed = [f"scale-ok-{i}" for i in range(16)]
    compensated = [f"scale-undo-{i}" for i in range(6)]
    first = [transaction(t) for t in committed] + [failing_third_step(t) for t in compensated]
    accepted = await asyncio.gather(*(recon.submit(body) for body in first))
    assert all(a.status_code == 202 for a in accepted), [a.text for a in accepted]
    # Shared work, not only shared partitions: every instance decided or called something.
    for name in ("decider", "decider-2"):
        await wait_for_log(stack, name, " dispatched (forward, attempt 1)")
        await wait_for_log(stack, name, " attempt 1: succeeded via response")
    # Mid-run: some transactions are done, most are not.
    await recon.wait_terminal(committed[0], timeout=60)
    # And the leaver surely holds live ones when it goes, however fast the rest ran: two on
    # its own partitions whose charges the sandbox holds for a second (under the stack's 2 s
    # provider timeout, a clean stop's wait for calls in flight and a killed member's
    # session), one seen called before it goes.
    await recon.disarm()
    await recon.arm("payments.charge", "delay", times=1000, delay_ms=1000)
    held = _ids_on(shares["decider-2"], "scale-held-ok", 2)
    accepted = await asyncio.gather(*(recon.submit(transaction(t)) for t in held))
    assert all(a.status_code == 202 for a in accepted), [a.text for a in accepted]
    await wait_for_log(stack, "decider-2", f"{held[0]} charge dispatched")
    committed += held

    survivor_log_at = len(stack.log_tail("decider", 1_000_000))
    for name in LEAVING:
        if leave == "sigterm":
            stack.stop(name)
        else:
            stack.kill(name)
            del stack.processes[name]
    # Submitted while the group has not noticed yet (after a kill: a session timeout):
    # these wait on partitions nobody serves, then the survivors serve them.
    later_ok = [f"scale-late-ok-{i}" for i in range(8)]
    late_compensated = [f"scale-late-undo-{i}" for i in range(2)]
    second = [transaction(t) for t in later_ok] + [failing_third_step(t) for t in late_compensated]
    accepted = await asyncio.gather(*(recon.submit(b, retry_unavailable=True) for b in second))
    assert all(a.status_code == 202 for a in accepted), [a.text for a in accepted]
    committed += later_ok
    compensated += late_compensated

    (deciders,) = await wait_spread(stack.kafka_bootstrap, _groups(stack), 1)
    _assert_deciders_own_both_inputs_together(deciders, topics)
    shares = await _decider_shares(stack, ("decider",), deciders)
    assert shares["decider"] == ALL, shares
    # Mid-run indeed: the survivor took over transactions that were still live.
    taken = _LIVE.findall(stack.log_tail("decider", 1_000_000)[survivor_log_at:])
    assert sum(int(live) for live in taken) > 0, taken
    for name in STAYING:
        assert stack.processes[name].poll() is None, stack.log_tail(name)

    await _assert_every_promise(stack, recon, committed, compensated)


def _ids_on(partitions: frozenset[int], prefix: str, count: int) -> list[str]:
    """The first `count` ids `prefix-i` whose transactions the producers put on `partitions`."""
    ids = (f"{prefix}-{i}" for i in itertools.count())
    on = (t for t in ids if partition_of(partition_key("demo", t)) in partitions)
    return list(itertools.islice(on, count))


def _groups(stack: Stack) -> list[str]:
    return [f"{stack.topic_prefix}recon-decider"]


def _partitions(view: GroupView) -> list[frozenset[int]]:
    return [frozenset(p for _, p in member) for member in view.members]


def _assert_deciders_own_both_inputs_together(view: GroupView, topics: Topics) -> None:
    """The range assignor gives a decider partition p of both inputs or of neither, or
    two deciders could each write one transaction's events (docs/design.md, Topics)."""
    for member in view.members:
        commands = {p for t, p in member if t == topics.commands}
        observations = {p for t, p in member if t == topics.observations}
        assert commands == observations and commands, view
    assert sorted(p for member in _partitions(view) for p in member) == sorted(ALL), view


async def _decider_shares(
    stack: Stack, names: tuple[str, ...], view: GroupView, timeout: float = 60
) -> dict[str, frozenset[int]]:
    """What each decider took and still holds, by its own log, once that matches what the
    group assigned (a take restores state first, so it completes after the assignment)."""
    assigned = sorted(_partitions(view), key=sorted)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        shares = {name: _held(stack.log_tail(name, 1_000_000)) for name in names}
        if sorted(shares.values(), key=sorted) == assigned:
            return shares
        assert asyncio.get_running_loop().time() < deadline, (shares, assigned)
        await asyncio.sleep(0.2)


def _held(log: str) -> frozenset[int]:
    held: set[int] = set()
    for verb, partition in _TOOK.findall(log):
        (held.add if verb == "took" else held.discard)(int(partition))
    return frozenset(held)


async def _assert_every_promise(
    stack: Stack, recon: Recon, committed: list[str], compensated: list[str]
) -> None:
    txs: dict[str, dict[str, Any]] = {}
    for tx_id in committed + compensated:
        txs[tx_id] = await recon.wait_terminal(tx_id, timeout=120)
    for tx_id in committed:
        assert txs[tx_id]["status"] == "committed", txs[tx_id]
    for tx_id in compensated:
        assert txs[tx_id]["status"] == "compensated", txs[tx_id]
        assert txs[tx_id]["compensation_plan"] == ["charge", "reserve"], txs[tx_id]

    # The work really was spread: transactions landed on every partition.
    events_topic = Topics(stack.topic_prefix).events
    records = await read_records(stack.kafka_bootstrap, events_topic)
    assert {r.partition for r in records} == set(ALL)

    # Provider side, from its log of calls (the effects table dedups a replayed key, the
    # call log does not): each effect applied exactly once, nothing re-sent without a
    # lookup that proved it absent, no effect where none may be.
    calls = await recon.calls()
    effects = await recon.effects()
    once: list[str] = []
    never: list[str] = []
    for tx_id in committed:
        once += [op(txs[tx_id], a)["op_key"] for a in ("reserve", "charge", "receipt")]
    for tx_id in compensated:
        tx = txs[tx_id]
        once += [op(tx, a)["op_key"] for a in ("reserve", "charge", "apology")]
        once += [compensation_op_key(tx, a) for a in ("charge", "reserve")]
        never += [op(tx, a)["op_key"] for a in ("deposit", "receipt")]
    for key in once:
        applies = [
            c["outcome"] for c in calls if c["idempotency_key"] == key and c["kind"] == "apply"
        ]
        assert applies == ["applied"], (key, [c for c in calls if c["idempotency_key"] == key])
        assert len(effects_for(effects, key)) == 1, key
    for key in never:
        assert effects_for(effects, key) == [], key
        assert "applied" not in [c["outcome"] for c in calls if c["idempotency_key"] == key]

    # Commit before notify, compensation in reverse order, notify after compensation.
    for tx_id in committed:
        receipt = effects_for(effects, op(txs[tx_id], "receipt")["op_key"])[0]
        events = await recon.events(tx_id)
        assert _at(receipt) >= time_of(events, "TransactionCommitted"), tx_id
    for tx_id in compensated:
        tx = txs[tx_id]
        refund = effects_for(effects, compensation_op_key(tx, "charge"))[0]
        release = effects_for(effects, compensation_op_key(tx, "reserve"))[0]
        assert _at(refund) < _at(release), tx_id
        apology = effects_for(effects, op(tx, "apology")["op_key"])[0]
        events = await recon.events(tx_id)
        assert "TransactionCommitted" not in [e["type"] for e in events]
        assert _at(apology) >= time_of(events, "TransactionCompensated"), tx_id

    # The log: one writer per transaction, so each chain verifies (read_event_log checks)
    # with its sequence numbers 1..n, no event written twice.
    log = await read_event_log(stack)
    for tx_id in committed + compensated:
        envelopes = log[("demo", tx_id)]
        assert [e.seq for e in envelopes] == list(range(1, len(envelopes) + 1)), tx_id
    event_ids = [e.event_id for envelopes in log.values() for e in envelopes]
    assert len(event_ids) == len(set(event_ids))


def _at(effect: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(effect["created_at"])
