"""A producer stopped while its batches cannot be delivered is stopped whole.

aiokafka's stop() waits for every queued batch first; the decider cuts it off (a stuck
transaction given up at its deadline, docs/decider.md), which left the producer's sender
task running and its connections open for the life of the process. Here the session's own
broker is stopped (SIGSTOP) with a batch on the wire, so that the batch cannot be delivered
while the producer is stopped: `stop_producer` must return about its timeout later with the
sender task ended and every connection closed.
"""

import asyncio
import os
import signal
import time

from aiokafka import AIOKafkaProducer
from support.topic_setup import create_topic

from services.devtools.infra import KafkaBroker
from services.kafka_clients import stop_producer

STOP_S = 2.0


async def test_a_producer_stopped_undelivered_leaves_no_sender_or_connection(
    kafka_broker: KafkaBroker, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}undelivered"
    await create_topic(kafka_broker.bootstrap, topic, 1)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_broker.bootstrap, acks="all", enable_idempotence=True
    )
    await producer.start()
    await producer.send_and_wait(topic, b"delivered")  # connections to the broker are open
    assert kafka_broker._proc is not None
    pid = kafka_broker._proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        undelivered = await producer.send(topic, b"undelivered")
        began = time.monotonic()
        await stop_producer(producer, STOP_S)
        took = time.monotonic() - began
        sender = producer._sender.sender_task
        assert sender is not None and sender.done(), "the sender task is still running"
        open_conns = [key for key, conn in producer.client._conns.items() if conn.connected()]
        assert not open_conns, f"connections left open: {open_conns}"
        assert undelivered.done(), "the undelivered batch's future never ends"
        assert took < STOP_S + 4, f"stopping took {took:.1f}s"
    finally:
        os.kill(pid, signal.SIGCONT)
    # The broker answers again (the next test's).
    check = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    await check.start()
    try:
        async with asyncio.timeout(30):
            await check.send_and_wait(topic, b"after")
    finally:
        await check.stop()
