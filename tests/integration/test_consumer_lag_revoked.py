"""A partition's recon_consumer_lag is left to its new owner when it moves: the member that
lost it sets it to 0 (services.kafka_clients._LagHandedOver), instead of exporting its
last value for the rest of its life, which kept ReconConsumerLagging firing after a
backlog was worked off by the members added to work it off (tests/alerts/
consumer_groups.yml has the alert's side).

Against a real broker with real members of one group (services.kafka_clients.
group_consumer), in one process: the second member never reports a lag of its own here,
so the gauge of each partition it took is what the first left."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from prometheus_client import REGISTRY
from support.intake_app import settings_fixture

from services.config import Settings
from services.consumer_groups import INTENTS
from services.kafka_clients import group_consumer
from services.metrics import observe_lag

TIMEOUT_S = 60
RECORDS_PER_PARTITION = 20

settings = settings_fixture()


def lag(group: str, topic: str, partition: int) -> float | None:
    return REGISTRY.get_sample_value(
        "recon_consumer_lag", {"group": group, "topic": topic, "partition": str(partition)}
    )


async def test_a_revoked_partitions_lag_is_left_to_its_new_owner(settings: Settings) -> None:
    group, topic = f"{settings.group_prefix}{INTENTS}", settings.topics.events
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(topic))
        assert len(partitions) >= 2, partitions
        # One batch per record: with the small fetch below, each fetch brings one record
        # per partition, so every partition is fetched (its lag set) long before its end.
        for n in range(RECORDS_PER_PARTITION):
            for partition in partitions:
                await producer.send_and_wait(topic, f"{n}".encode(), partition=partition)
    finally:
        await producer.stop()

    first = group_consumer(settings, INTENTS, "lag-first", max_partition_fetch_bytes=64)
    first.subscribe([topic])
    second = group_consumer(settings, INTENTS, "lag-second")
    second.subscribe([topic])
    await first.start()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            # A backlog on every partition, as the first member, alone, reports it.
            fetched: set[int] = set()
            while fetched != set(partitions):
                batch = await first.getmany(timeout_ms=500, max_records=1)
                await observe_lag(first, group, batch)
                fetched |= {tp.partition for tp in batch}
            behind = {p: lag(group, topic, p) for p in partitions}
            assert all((behind[p] or 0) > 0 for p in partitions), behind
            await second.start()
            while not second.assignment():
                await second.getmany(timeout_ms=500, max_records=1)
        moved = second.assignment()
        assert moved, "the second member took no partition"
        for tp in moved:
            assert lag(group, tp.topic, tp.partition) == 0, (tp, lag(group, tp.topic, tp.partition))
    finally:
        await second.stop()
        await first.stop()
