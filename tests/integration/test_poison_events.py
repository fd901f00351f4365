"""An unreadable record on recon.events is set aside by every at-least-once consumer with
the same dead-letter headers, and nobody stops: the next transaction still commits."""

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from support.recon_client import Recon, transaction

from events.dead_letters import CONSUMER, ORIGIN, REASON
from events.topics import Topics
from services.devtools.stack import Stack


async def test_poison_on_the_event_log_is_dead_lettered_once_per_consumer(
    stack: Stack, recon: Recon
) -> None:
    topics = Topics(stack.topic_prefix)
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap)
    await producer.start()
    try:
        sent = await producer.send_and_wait(
            topics.events, value=b"\xff not an envelope", key=b"demo/poison", partition=1
        )
    finally:
        await producer.stop()

    assert (await recon.submit(transaction("after-poison"))).status_code == 202
    tx = await recon.wait_terminal("after-poison")
    assert tx["status"] == "committed", tx

    origin = f"{topics.events}:1:{sent.offset}".encode()
    groups = {
        f"{stack.topic_prefix}recon-dispatcher".encode(),
        f"{stack.topic_prefix}recon-saga".encode(),
        f"{stack.topic_prefix}recon-projector".encode(),
    }
    judged: dict[bytes, dict[str, bytes]] = {}
    consumer = AIOKafkaConsumer(
        topics.dead_letters, bootstrap_servers=stack.kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + 60
        while set(judged) != groups:
            assert time.monotonic() < deadline, f"dead-lettered by {set(judged)} only"
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    headers = dict(record.headers)
                    assert record.value == b"\xff not an envelope"
                    assert headers[ORIGIN] == origin
                    judged[headers[CONSUMER]] = headers
            await asyncio.sleep(0)
    finally:
        await consumer.stop()
    assert all(h[REASON] for h in judged.values())
    for name in ("dispatcher", "saga", "projector"):
        assert stack.processes[name].poll() is None, stack.log_tail(name)
