"""The group watch keeps each group's coordinator (services.intake.group_coordinators), and a
coordinator moves when its broker goes down: on three brokers (replication 3), the saga
group's coordinator is killed with -9, another takes the group, and the killed one comes
back as a broker that is not the group's coordinator any more (it answers NOT_COORDINATOR,
which reaches the admin client as an OffsetFetch answer listing no partitions). The group's
positions read after that are the ones read before, not every partition's start."""

from __future__ import annotations

import asyncio

from support.decider_support import eventually
from test_cluster_broker_kills import kafka_cluster  # noqa: F401 (the fixture)

from events.topics import Topics
from services.config import Settings, TopicLayout
from services.consumer_groups import SAGA
from services.devtools.group_watch_cost import idle_groups
from services.devtools.infra.kafka_cluster import KafkaCluster
from services.intake.group_positions import GroupPositions
from services.intake.health import admin_client
from services.kafka_setup import ensure_topics


async def test_positions_read_after_the_coordinator_moved_are_the_groups_own(
    kafka_cluster: KafkaCluster,  # noqa: F811
    topic_prefix: str,
) -> None:
    settings = Settings(
        kafka_bootstrap=kafka_cluster.bootstrap,
        database_url="postgresql://unused@127.0.0.1:1/unused",
        topics=Topics(topic_prefix),
        environment="test",
        topic_layout=TopicLayout(replication_factor=3, min_insync_replicas=2),
    )
    await ensure_topics(settings.kafka_bootstrap, settings.topics, layout=settings.topic_layout)
    await idle_groups(settings)
    admin = admin_client(settings)
    await admin.start()
    positions = GroupPositions(settings, admin, "test-watch")
    group = f"{settings.group_prefix}{SAGA}"
    try:
        before = (await positions.standings((SAGA,), await positions.partitions()))[SAGA]
        assert before and all(s.position == s.end - 1 for s in before.values()), before
        kept = await admin.find_coordinator(group)

        kafka_cluster.node(kept).kill()

        async def moved() -> bool:
            try:
                return bool(await admin.find_coordinator(group) != kept)
            except Exception:
                return False  # no coordinator while the group's partition elects a leader

        await eventually(moved, "another coordinator for the group")
        await asyncio.to_thread(kafka_cluster.node(kept).start)

        after = (await positions.standings((SAGA,), await positions.partitions()))[SAGA]
        assert after == before
    finally:
        await positions.close()
        await admin.close()
