"""A decider fenced while no other decider holds the partition takes it back and serves it.

A fence says only that a producer initialised the partition's transactional id after the
decider's: another decider taking the partition does that, but so does a transaction
coordinator that aborts an open transaction it timed out (it bumps the epoch), and so does a
stray producer of the id. Here a producer of every partition's id is started from outside,
while the one decider of the group holds them all. The decider used to drop each fenced
partition and wait for a rebalance that never came (it stayed the group's only member): its
transactions stopped where they stood, the dispatch committed and its answer never decided.
Now it asks the group, which gives the partitions back: every transaction submitted after
the fences commits, and each call is applied once."""

import asyncio

from aiokafka import AIOKafkaProducer
from support.crash_support import wait_for_log
from support.recon_client import Recon, op, transaction

from events.topics import PARTITIONS, Topics
from services.devtools.stack import Stack

TRANSACTIONS = 8  # each meets the fence on its partition, whichever that is


async def test_a_decider_fenced_with_no_other_owner_takes_its_partitions_back(
    stack: Stack, recon: Recon
) -> None:
    assert (await recon.submit(transaction("before"))).status_code == 202
    before = await recon.wait_terminal("before", timeout=60)
    assert before["status"] == "committed", before

    prefix = Topics(stack.topic_prefix).prefix
    for partition in range(PARTITIONS):
        stray = AIOKafkaProducer(
            bootstrap_servers=stack.kafka_bootstrap,
            transactional_id=f"{prefix}recon-decider-{partition}",
            enable_idempotence=True,
        )
        await stray.start()  # init_transactions: the decider's producer of it is fenced
        await stray.stop()

    tx_ids = [f"after-{n}" for n in range(TRANSACTIONS)]
    for tx_id in tx_ids:
        assert (await recon.submit(transaction(tx_id))).status_code == 202
    settled = await asyncio.gather(*(recon.wait_terminal(t, timeout=90) for t in tx_ids))
    assert [tx["status"] for tx in settled] == ["committed"] * TRANSACTIONS, settled
    await wait_for_log(stack, "decider", "asking the group who owns it", timeout=10)
    for tx in settled:
        for action in ("reserve", "charge", "receipt"):
            await recon.assert_applied_once(op(tx, action)["op_key"])
