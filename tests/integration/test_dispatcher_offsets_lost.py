"""A dispatcher group that lost its offsets reads every dispatch ever made again; none whose
attempt is over may reach the provider again (a provider whose keys expire would apply it)."""

import asyncio
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from support.recon_client import Recon, op, transaction

from events.topics import PARTITIONS, Topics
from services.devtools.stack import Stack


async def test_old_dispatches_are_not_acted_on_after_the_group_loses_its_offsets(
    stack: Stack, recon: Recon
) -> None:
    # A declined charge: the lookup a replayed dispatch does first finds nothing under the
    # key (exactly what an expired key at a real provider looks like), so only the check of
    # the attempt stands between the replay and a second call.
    assert (await recon.submit(transaction("lost-1", customer="cus_decline"))).status_code == 202
    tx = await recon.wait_terminal("lost-1")
    assert op(tx, "charge")["state"] == "failed"
    assert tx["status"] in ("failed", "compensated"), tx

    stack.stop("dispatcher")
    group = f"{stack.topic_prefix}recon-dispatcher"
    topic = Topics(stack.topic_prefix).events
    ends = await _reset_to_earliest(stack.kafka_bootstrap, group, topic)
    assert ends, "nothing to read again"

    # Any call of these operations now reaches the provider and spends its fault: the
    # provider-side witness of a replayed dispatch.
    for operation in ("payments.charge", "inventory.reserve", "inventory.release"):
        await recon.arm(operation, "error_500_before_commit")

    stack.start("dispatcher")
    await _wait_committed(stack.kafka_bootstrap, group, ends)

    armed = (await recon.http.get(f"{stack.sandbox_url}/v1/faults")).json()["faults"]
    assert sorted(f["operation"] for f in armed) == [
        "inventory.release",
        "inventory.reserve",
        "payments.charge",
    ], armed
    assert "not dispatched" in stack.log_tail("dispatcher", 10_000)


async def _reset_to_earliest(bootstrap: str, group: str, topic: str) -> dict[TopicPartition, int]:
    """What `kafka-consumer-groups --reset-offsets --to-earliest` does to the (empty) group;
    returns, per partition, the offset just past the last record there is to read."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        isolation_level="read_committed",
        # Or stopping it would commit its own position (the end) over the reset.
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.commit({tp: 0 for tp in partitions})
        # The last record, not the end offset: a transaction marker takes an offset that
        # no consumer ever commits past.
        ends = await consumer.end_offsets(partitions)
        await consumer.seek_to_beginning(*partitions)
        last: dict[TopicPartition, int] = {}
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                if records:
                    last[tp] = records[-1].offset + 1
        return last
    finally:
        await consumer.stop()


async def _wait_committed(bootstrap: str, group: str, ends: dict[TopicPartition, int]) -> None:
    """Until the group has committed past every record that existed before the reset."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + 60
        committed: dict[TopicPartition, object] = {}
        while time.monotonic() < deadline:
            committed = await admin.list_consumer_group_offsets(group)
            if all(
                tp in committed and committed[tp].offset >= end  # type: ignore[attr-defined]
                for tp, end in ends.items()
            ):
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"{group} never read the old dispatches again: {committed}")
    finally:
        await admin.close()
