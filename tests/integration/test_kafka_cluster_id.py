"""The cluster id a call fence names (services.kafka_cluster_id) is the one the brokers were
formatted with, asked over a started producer's own connections: the fences of two
clusters are told apart by it (services.dispatcher.call_fence). Real broker."""

from events.topics import Topics
from services.config import Settings
from services.devtools.infra.kafka import KafkaBroker
from services.kafka_clients import acked_producer
from services.kafka_cluster_id import cluster_id


async def test_the_id_is_the_one_the_cluster_was_formatted_with(
    kafka_broker: KafkaBroker, database_url: str, topic_prefix: str
) -> None:
    settings = Settings(
        kafka_bootstrap=kafka_broker.bootstrap,
        database_url=database_url,
        topics=Topics(topic_prefix),
        environment="test",
    )
    meta = (kafka_broker.log_dirs / "meta.properties").read_text().splitlines()
    (formatted,) = [line.split("=", 1)[1] for line in meta if line.startswith("cluster.id=")]
    producer = acked_producer(settings, "cluster-id-test")
    await producer.start()
    try:
        assert await cluster_id(producer.client) == formatted
    finally:
        await producer.stop()
