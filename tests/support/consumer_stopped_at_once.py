"""A consumer without a group stopped with no turn of the loop after its start: aiokafka's
own stop raises CancelledError there and closes nothing (its reset task cancelled before it
ran: services/kafka_consumer_stop.py). Imports aiokafka alone, so that a process running it
has only what its own entry imported of recon (tests/integration/test_audit_worker_mended.py)."""

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition


async def _stop_after_start(bootstrap: str, topic: str) -> str:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        return "its stop raised CancelledError"
    open_connections = [c for c in consumer._client._conns.values() if c.connected()]
    return f"stopped, {len(open_connections)} connections left open"


def stop_after_start(bootstrap: str, topic: str) -> str:
    """What became of the stop, in a loop of its own (a spawned worker's)."""
    return asyncio.run(_stop_after_start(bootstrap, topic))
