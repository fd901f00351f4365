"""Producing the audit benchmark's records (services.devtools.synthetic_log) onto a test's
topics, with their simulated Kafka timestamps."""

from collections.abc import Iterable

from aiokafka import AIOKafkaProducer

from events.topics import Topics
from services.devtools.synthetic_log import Produced


async def produce(
    kafka_bootstrap: str, topics: Topics, records: Iterable[Produced], roles: Iterable[str]
) -> None:
    """Each record whose role is one of `roles` onto that topic of `topics`, in order."""
    topic_of = {role: getattr(topics, role) for role in roles}
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for r in records:
            if r.role in topic_of:
                await producer.send(topic_of[r.role], r.value, r.key, timestamp_ms=r.timestamp_ms)
        await producer.flush()
    finally:
        await producer.stop()
