"""Topic layout: recon's topics are created with the configured replication factor,
min.insync.replicas and partition count, read back from the broker; a setting the cluster
cannot honour stops the process instead of leaving topics missing, and so does a partition
count other than the existing topics'."""

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import NodeNotReadyError
from support.topic_records import described_topics, partition_counts

from events.topics import PARTITIONS, Topics
from services.config import MAX_PARTITIONS, ConfigError, TopicLayout, load_settings
from services.kafka_setup import TopicSetupError, ensure_topics, topic_configs

_TOPIC_CONFIG = 1


async def _described(bootstrap: str, names: list[str]) -> dict[str, tuple[int, dict[str, str]]]:
    """name -> (replicas of partition 0, the topic's own (non-default) configs)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        topics = await described_topics(admin, names)
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
    finally:
        await admin.close()
    own: dict[str, dict[str, str]] = {}
    for response in responses:
        for _code, _msg, _type, name, entries in response.resources:
            # (name, value, read_only, config_source, ...): source 1 is DYNAMIC_TOPIC_CONFIG,
            # a value set on the topic itself rather than inherited from the broker.
            own[name] = {e[0]: e[1] for e in entries if e[3] == _TOPIC_CONFIG}
    return {name: (len(topics[name]["partitions"][0]["replicas"]), own[name]) for name in names}


async def test_topics_are_created_with_the_configured_min_insync_replicas(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(
        kafka_bootstrap, topics, layout=TopicLayout(replication_factor=1, min_insync_replicas=1)
    )

    names = sorted(topic_configs(topics))
    described = await _described(kafka_bootstrap, names)
    for name in names:
        replicas, own = described[name]
        assert replicas == 1, name
        # Set on the topic itself, not inherited from whatever the broker's default is.
        assert own.get("min.insync.replicas") == "1", (name, own)


async def test_a_replication_factor_the_cluster_cannot_honour_stops_start_up(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    # The test broker is a single node: 3 copies cannot be placed. Creating nothing and
    # carrying on would leave every process waiting on topics that never appear.
    with pytest.raises(TopicSetupError, match="replication"):
        await ensure_topics(
            kafka_bootstrap,
            Topics(topic_prefix),
            timeout_s=10,
            layout=TopicLayout(replication_factor=3, min_insync_replicas=2),
        )


def test_topic_layout_settings_are_read_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_KAFKA_REPLICATION_FACTOR", "3")
    monkeypatch.setenv("RECON_KAFKA_MIN_INSYNC_REPLICAS", "2")
    assert load_settings().topic_layout == TopicLayout(3, 2)

    monkeypatch.setenv("RECON_KAFKA_MIN_INSYNC_REPLICAS", "4")
    with pytest.raises(ConfigError, match="RECON_KAFKA_MIN_INSYNC_REPLICAS"):
        load_settings()

    monkeypatch.delenv("RECON_KAFKA_REPLICATION_FACTOR")
    monkeypatch.delenv("RECON_KAFKA_MIN_INSYNC_REPLICAS")
    assert load_settings().topic_layout == TopicLayout(1, 1, PARTITIONS)

    monkeypatch.setenv("RECON_KAFKA_PARTITIONS", "1")
    assert load_settings().topic_layout == TopicLayout(1, 1, 1)
    for refused in ("0", str(MAX_PARTITIONS + 1), "four", "2.5"):
        monkeypatch.setenv("RECON_KAFKA_PARTITIONS", refused)
        with pytest.raises(ConfigError, match="RECON_KAFKA_PARTITIONS"):
            load_settings()


async def test_topics_get_the_configured_partition_count_and_keep_it(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topics = Topics(topic_prefix)
    names = sorted(topic_configs(topics))
    await ensure_topics(kafka_bootstrap, topics, layout=TopicLayout(partitions=1))
    assert await partition_counts(kafka_bootstrap, names) == dict.fromkeys(names, 1)

    # Started again with the default count on the same log: refused, naming the topics'
    # count, rather than carrying on with keys that would map to other partitions.
    with pytest.raises(TopicSetupError, match=r"RECON_KAFKA_PARTITIONS is 4 .*recon.events has 1"):
        await ensure_topics(kafka_bootstrap, topics, timeout_s=10)
    # The same count again starts; nothing was changed by the refusal.
    await ensure_topics(kafka_bootstrap, topics, layout=TopicLayout(partitions=1))
    assert await partition_counts(kafka_bootstrap, names) == dict.fromkeys(names, 1)


async def test_a_topic_missing_from_a_log_is_created_with_the_logs_count(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    # A topic a newer version adds (recon.governance was one) on a log of another count is
    # created with the configured one, the count the existing topics were checked against.
    topics = Topics(topic_prefix)
    await ensure_topics(
        kafka_bootstrap, topics, layout=TopicLayout(partitions=2), extra={f"{topic_prefix}x": {}}
    )
    names = [*sorted(topic_configs(topics)), f"{topic_prefix}x"]
    assert set((await partition_counts(kafka_bootstrap, names)).values()) == {2}


async def test_a_broker_lost_between_connecting_and_asking_is_waited_for(
    kafka_bootstrap: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a broker restart looks like to a process starting at that moment (found by `make
    # chaos`: a decider restarted then exited with this very error). The broker is real; only
    # its first answer is replaced by the error it gave, since the instant cannot be timed.
    real_list_topics = AIOKafkaAdminClient.list_topics
    failures = [NodeNotReadyError("Attempt to send a request to node which is not ready")]

    async def flaky_list_topics(self: AIOKafkaAdminClient) -> list[str]:
        if failures:
            raise failures.pop()
        topics: list[str] = await real_list_topics(self)
        return topics

    monkeypatch.setattr(AIOKafkaAdminClient, "list_topics", flaky_list_topics)
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics, timeout_s=30)
    assert failures == []
    monkeypatch.undo()
    described = await _described(kafka_bootstrap, sorted(topic_configs(topics)))
    assert set(described) == set(topic_configs(topics))
