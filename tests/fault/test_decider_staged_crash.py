"""A decider killed (kill -9) while decisions that only record evidence are staged.

Group commit (services.decider.group_commit) holds such decisions in memory for the
partition's next Kafka transaction: nothing of them is sent, and their inputs' offsets are
not committed. The test holds the decider at the moment a webhook's decision is staged,
proves that the webhook is past the decider's committed offset (on its changelog) and has
no event on the log (not even uncommitted), kills the decider, and checks that the restarted one
decided it exactly once: every observation of the transaction is on its chain once, the
chain is whole and verified.
"""

import asyncio
from collections import Counter
from pathlib import Path

from aiokafka import TopicPartition
from support.crash_support import read_records, start_paused_at, wait_paused
from support.decider_support import changelog_offsets
from support.recon_client import Recon, transaction
from support.tests_support_log import read_event_log

from events.topics import Topics
from services.crash_points import DECIDER_WITH_STAGED_INPUTS
from services.devtools.stack import Stack

TX = "staged-1"


async def _committed(stack: Stack, tp: TopicPartition) -> int:
    """Where the decider's inputs are committed: on its changelog, with its transactions."""
    offsets = await changelog_offsets(
        stack.kafka_bootstrap, Topics(stack.topic_prefix), tp.partition
    )
    return offsets.get(tp.topic, 0)


async def _observations(stack: Stack) -> list[tuple[int, int, str]]:
    """(partition, offset, message_id) of the transaction's observations, committed."""
    topic = Topics(stack.topic_prefix).observations
    return [
        (r.partition, r.offset, r.value["message_id"])
        for r in await read_records(stack.kafka_bootstrap, topic)
        if r.value["tx_id"] == TX
    ]


async def test_decider_killed_with_staged_inputs_decides_them_once_after_restart(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    topics = Topics(stack.topic_prefix)
    marker = tmp_path / "paused"
    start_paused_at(stack, "decider", DECIDER_WITH_STAGED_INPUTS, marker)
    # The reserve's webhook comes well after its answer, which the decider takes from its own
    # call (services/decider/dispatch_host.py) and decides at once: alone, the webhook's
    # decision only records evidence, and is staged. (Arriving while the answer's urgent
    # decision waits for its transaction, it would ride with it instead.)
    await recon.arm("inventory.reserve", "webhook_delay", delay_ms=3000)
    assert (await recon.submit(transaction(TX))).status_code == 202
    await wait_paused(stack, "decider", marker)

    # Held with a decision staged: at least one observation of the transaction lies past the
    # committed offset, and nothing on the log (read_uncommitted: not even an open
    # transaction's records) carries its evidence.
    written = [
        r.value
        for r in await read_records(stack.kafka_bootstrap, topics.events, "read_uncommitted")
        if r.value["tx_id"] == TX
    ]
    seen = {e["data"]["evidence"]["observation_id"] for e in written if "evidence" in e["data"]}
    staged = []
    for partition, offset, message_id in await _observations(stack):
        committed = await _committed(stack, TopicPartition(topics.observations, partition))
        if offset >= committed and message_id not in seen:
            staged.append(message_id)
    assert staged, "the decider paused with no uncommitted, unwritten observation staged"

    stack.kill("decider")
    stack.start("decider")
    tx = await recon.wait_terminal(TX, timeout=90)
    assert tx["status"] == "committed", tx

    # Every observation of the transaction, the staged ones included, is decided exactly
    # once: one event carries its evidence (the README transaction's observations each
    # make one), however many times it was decided in memory.
    observed = Counter(message_id for _, _, message_id in await _observations(stack))
    recorded: Counter[str] = Counter()
    for _ in range(100):
        log = await read_event_log(stack)  # verifies the chain on the way
        envelopes = log[("demo", TX)]
        assert [e.seq for e in envelopes] == list(range(1, len(envelopes) + 1))
        recorded = Counter(
            e.data["evidence"]["observation_id"] for e in envelopes if "evidence" in e.data
        )
        if recorded == observed and set(staged) <= set(recorded):
            break
        observed = Counter(message_id for _, _, message_id in await _observations(stack))
        await asyncio.sleep(0.3)
    assert recorded == observed, (recorded, observed)
    assert set(staged) <= set(recorded)
