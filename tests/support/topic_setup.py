"""Creating a test's own topic on the broker it runs against."""

from aiokafka.admin import AIOKafkaAdminClient, NewTopic


async def create_topic(bootstrap: str, topic: str, partitions: int, replication: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, replication)])
    finally:
        await admin.close()
