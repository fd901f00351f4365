"""A decider transaction's records go to Kafka one batch per partition
(services.decider.record_batches): each record lands in the order planned on its partition,
a partition's records past one batch's size start another, a record with no partition goes
by the topic's partitioner, and the offset given for each planned record is the one it has
in the log (a finished transaction's marker is found by it). Real Kafka."""

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from events.topics import Topics
from services.decider.record_batches import Planned, send_planned
from services.kafka_setup import ensure_topics


async def test_each_planned_record_is_written_where_and_at_the_offset_it_is_told(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    big = b"x" * 6000  # two of these fill the 16 KiB batch below with what came before
    planned = [
        Planned(topics.events, b"e0", b"k", 1, [("type", b"A")]),
        Planned(topics.decider_state, b"s0", b"k", 1),
        Planned(topics.events, b"e1", b"k", 1),
        Planned(topics.dead_letters, b"d0", b"k", None, [("reason", b"r")]),
        *(Planned(topics.events, big + bytes([n]), b"k", 1) for n in range(4)),
        Planned(topics.events, b"e-last", b"k", 1),
        Planned(topics.decider_state, b"s1", b"k", 1),
        Planned(topics.events, b"other", b"k", 2),
    ]
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap,
        transactional_id=f"{topic_prefix}test-record-batches",
        max_batch_size=16 * 1024,
    )
    await producer.start()
    try:
        async with producer.transaction():
            sent = await send_planned(producer, planned)
            await sent.acknowledged()
    finally:
        await producer.stop()
    # The events of partition 1 in two batches; its states, the dead letter, partition 2.
    assert len(sent.batches) == 5

    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        for index, record in enumerate(planned):
            if record.partition is None:
                tp = TopicPartition(
                    record.topic, sent.batches[sent.places[index][0]].result().partition
                )
            else:
                tp = TopicPartition(record.topic, record.partition)
            consumer.assign([tp])
            consumer.seek(tp, sent.offset(index))
            got = (await consumer.getmany(tp, timeout_ms=10_000, max_records=1))[tp][0]
            assert (got.value, got.key, list(got.headers)) == (
                record.value,
                record.key,
                record.headers or [],
            ), index
    finally:
        await consumer.stop()
