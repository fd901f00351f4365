"""A group consumer sees a record on a partition it has just read without waiting out a
long poll (services.kafka_clients.PREFETCH_BACKOFF_S): the 202 -> commit path reads the same
partition several times per transaction (its observations, its next dispatches).

aiokafka holds back fetches to a broker while fetched records wait to be taken, but only
for prefetch_backoff (100 ms): a batch handled longer than that (a provider call, a Kafka
transaction on a busy machine) lets a fetch go out without the partition whose records
wait, and the connection carries one fetch at a time. A record arriving on that partition
next waits until that fetch ends: fetch_max_wait_ms, 500 ms by aiokafka's default. recon's
group consumers wait for their records to be taken instead."""

from __future__ import annotations

import asyncio
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from events.topics import Topics
from services.config import Settings
from services.kafka_clients import group_consumer

# With aiokafka's 100 ms prefetch backoff the last read of each round waits ~200 ms or more
# (the rest of a 500 ms long poll sent ~100 ms into the 300 ms "handling"); with the fix,
# one fetch.
BOUND_S = 0.2


async def test_a_partition_just_read_is_read_again_without_a_long_poll(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}fetch-wait-{uuid.uuid4().hex[:6]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        # Two partitions: the fetch that excludes the one just read still has one to wait on.
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url="postgresql://unused",
        topics=Topics(topic_prefix),
        environment="test",
    )
    consumer = group_consumer(settings, f"fetch-wait-{uuid.uuid4().hex[:6]}", "test")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    consumer.subscribe([topic])
    await consumer.start()
    await producer.start()
    try:
        async with asyncio.timeout(60):
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=100)
            took: list[float] = []
            for i in range(3):
                # A record read, the next one fetched but left waiting while the batch
                # before it is "handled" (longer than aiokafka's 100 ms prefetch backoff).
                await producer.send_and_wait(topic, b"a%d" % i, partition=0)
                await read_one(consumer, topic)
                await producer.send_and_wait(topic, b"b%d" % i, partition=0)
                await asyncio.sleep(0.3)
                await read_one(consumer, topic)
                # Now a record on the same partition: how long until it is read?
                await producer.send_and_wait(topic, b"c%d" % i, partition=0)
                sent = time.monotonic()
                await read_one(consumer, topic)
                took.append(time.monotonic() - sent)
        assert min(took) < BOUND_S, took
    finally:
        await producer.stop()
        await consumer.stop()


async def read_one(consumer: AIOKafkaConsumer, topic: str) -> None:
    got: list[object] = []
    while not got:
        batch = await consumer.getmany(TopicPartition(topic, 0), timeout_ms=1000)
        got = [r for records in batch.values() for r in records]
