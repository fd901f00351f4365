"""Reading recon.events straight from Kafka, as an auditor would."""

import time
from collections import defaultdict

from aiokafka import AIOKafkaConsumer, TopicPartition

from events.envelope import Envelope, verify_chain
from events.topics import Topics
from services.devtools.stack import Stack

# Reading to known end offsets is quick; a broker that stops answering must fail the test,
# not spin until the suite's timeout.
READ_TIMEOUT_S = 60


async def read_event_log(stack: Stack) -> dict[tuple[str, str], list[Envelope]]:
    """Every committed event, grouped by transaction, each chain verified on the way."""
    topic = Topics(stack.topic_prefix).events
    consumer = AIOKafkaConsumer(
        bootstrap_servers=stack.kafka_bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        partitions = [
            TopicPartition(topic, p)
            for p in consumer.partitions_for_topic(topic) or await _partitions(consumer, topic)
        ]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        log: dict[tuple[str, str], list[Envelope]] = defaultdict(list)
        deadline = time.monotonic() + READ_TIMEOUT_S
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, f"{topic} not read to its end offsets {ends}"
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for record in records:
                    envelope = Envelope.model_validate_json(record.value)
                    log[(envelope.tenant, envelope.tx_id)].append(envelope)
    finally:
        await consumer.stop()
    for key, envelopes in log.items():
        assert verify_chain(envelopes) == [], (key, verify_chain(envelopes))
    return dict(log)


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()
    return consumer.partitions_for_topic(topic) or set()
