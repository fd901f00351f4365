"""A decider asked to stop while its group rebalances takes nothing the rebalance gives it,
and leaves no producer unstopped.

Its run's last steps hand over and drop the partitions it owns, then stop its consumer; but
aiokafka's consumer stop first lets the coordinator finish the rebalance it is in (its
JoinGroup and SyncGroup), whose assignment the decider's listener takes: a transactional
producer started per partition, after the drops. Nothing stopped those (Decider.stop_clients
knew only the consumer, the changelog reader and the calls' producer): each was collected
unstopped, which fails the suite's run (docs/testing.md, "Kafka clients left unstopped"),
and in a process kept its connections and sender until the process ended; with its calls
on, the take-over started calls it then abandoned. Now the listener takes nothing once the
stop is asked (the next owner does), and Decider.stop_clients drops whatever is still owned
(a start given up on the stop after a take). A member leaving
(test_decider_hand_over's joining decider) and the first decider stopped next is that
moment, met (rarely) or missed by a heartbeat's timing.

Here the moment is made, not waited for: the test holds the decider's lock (which its loop
and its listener take), a second member joins, and the decider is asked to stop while its
revocation waits for the lock. Real broker; the decider runs in this process, its calls off."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from support.decider_support import eventually, in_process
from support.kafka_leaks import unstopped

from events.topics import PARTITIONS, Topics
from services import consumer_groups
from services.config import Settings
from services.decider import runtime
from services.decider.runtime import Decider
from services.kafka_clients import client_id, group_consumer


@pytest.mark.timeout(120)
async def test_a_decider_stopping_mid_rebalance_takes_nothing_and_leaves_no_producer_unstopped(
    kafka_bootstrap: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = Topics(topic_prefix)
    settings = await in_process(kafka_bootstrap, topics)
    stop = asyncio.Event()
    revoking = asyncio.Event()
    revoked = runtime._Listener.on_partitions_revoked

    async def noted(listener: runtime._Listener, partitions: set[TopicPartition]) -> None:
        if partitions:
            revoking.set()
        await revoked(listener, partitions)

    assigned_stopping: list[set[TopicPartition]] = []
    assigned = runtime._Listener.on_partitions_assigned

    async def seen(listener: runtime._Listener, partitions: set[TopicPartition]) -> None:
        if stop.is_set():
            assigned_stopping.append(partitions)
        await assigned(listener, partitions)

    made_stopping: list[AIOKafkaProducer] = []
    made = Decider.transactional_producer

    def noting(decider: Decider, partition: int) -> AIOKafkaProducer:
        producer = made(decider, partition)
        if stop.is_set():
            made_stopping.append(producer)
        return producer

    monkeypatch.setattr(runtime._Listener, "on_partitions_revoked", noted)
    monkeypatch.setattr(runtime._Listener, "on_partitions_assigned", seen)
    monkeypatch.setattr(Decider, "transactional_producer", noting)
    decider = Decider(settings)
    running = asyncio.create_task(decider.run(stop))
    try:

        async def owns_every_partition() -> bool:
            assert not running.done(), running
            return len(decider.owned) == PARTITIONS

        await eventually(owns_every_partition, f"the decider owning its {PARTITIONS} partitions")
        async with _member(settings):
            async with decider.lock:  # its loop and its listener wait here
                await asyncio.wait_for(revoking.wait(), 30)  # the member's join revokes
                stop.set()
            # The revocation drops every partition, then the run's own last steps find
            # none; its consumer's stop completes the rebalance, the member still in it.
            await asyncio.wait_for(running, 60)
        running.result()
        assert any(assigned_stopping), (
            "nothing was assigned while the decider stopped: not the path"
        )
        assert made_stopping == [], "partitions were taken while the decider stopped"
        assert unstopped(client_id("decider-transactions")) == []
    finally:
        stop.set()
        if not running.done():
            running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await decider.stop_clients()


@asynccontextmanager
async def _member(settings: Settings) -> AsyncIterator[AIOKafkaConsumer]:
    """A second member of the deciders' group (their assignor, their inputs), polled so that
    it joins."""
    member = group_consumer(
        settings,
        consumer_groups.DECIDER,
        "test-member",
        partition_assignment_strategy=(RangePartitionAssignor,),
    )
    member.subscribe(consumer_groups.inputs(consumer_groups.DECIDER, settings))
    polling = asyncio.create_task(_polled(member))
    try:
        yield member
    finally:
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        await member.stop()


async def _polled(member: AIOKafkaConsumer) -> None:
    await member.start()
    while True:
        await member.getmany(timeout_ms=200)
