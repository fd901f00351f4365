"""The console's Kafka counts (services.intake.console.kafka_counts) against a real broker: a
group's lag is what its inputs hold past what it committed, a partition it never committed
on counted from its start; the dead letters are the records of their topic."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from support.intake_app import settings_fixture

from services.config import Settings
from services.consumer_groups import DECIDER, SAGA
from services.intake.console.kafka_counts import KafkaCounts
from services.intake.health import admin_client

settings = settings_fixture()


async def test_a_group_that_committed_nothing_is_behind_by_what_its_inputs_hold(
    settings: Settings,
) -> None:
    events = settings.topics.events
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    try:
        for partition in (0, 0, 1):
            await producer.send_and_wait(events, b"{}", partition=partition)
        await producer.send_and_wait(settings.topics.dead_letters, b"{}", partition=2)
    finally:
        await producer.stop()
    admin = admin_client(settings)
    await admin.start()
    counts = KafkaCounts(settings, admin)
    try:
        # The saga reads recon.events and has committed nothing: 3 behind (it read 0).
        found = await counts.counts()
        assert found[f"lag:{SAGA}"] == 3, found
        # Inputs with nothing in them: no lag.
        assert found[f"lag:{DECIDER}"] == 0, found
        assert found["dead_letters"] == 1, found

        # Partition 0 read through: only partition 1's record is left. (Committed through a
        # coordinator, which a fresh broker makes now: before, no offsets topic, nothing
        # committed, and the count above asked nobody.)
        group = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap,
            group_id=f"{settings.group_prefix}{SAGA}",
            enable_auto_commit=False,
        )
        await group.start()
        try:
            group.assign([TopicPartition(events, 0)])
            await group.commit({TopicPartition(events, 0): 2})
        finally:
            await group.stop()
        assert (await counts.counts())[f"lag:{SAGA}"] == 1
    finally:
        await counts.close()
        await admin.close()
