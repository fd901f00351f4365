"""The Kafka intents door of one tenant (`acme`), run in the test's event loop as its
process runs it (services.intake.kafka_intents.run_intents), with a producer of intents and
a reader of the door's replies."""

import asyncio
import contextlib
import json
import time
from typing import Any

from aiokafka import AIOKafkaProducer

from services.config import Settings
from services.intake import kafka_intents
from support.topic_records import read_records


async def replies(settings: Settings, wanted: set[str], timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    found: dict[str, Any] = {}
    while time.monotonic() < deadline:
        for r in await read_records(
            settings.kafka_bootstrap, settings.topics.intent_replies("acme")
        ):
            if r.key is not None and r.value is not None:
                found[r.key.decode()] = json.loads(r.value)
        if wanted <= set(found):
            return found
        await asyncio.sleep(0.3)
    raise AssertionError(f"no replies for {wanted - set(found)} within {timeout}s: {found}")


@contextlib.asynccontextmanager
async def door(settings: Settings) -> Any:
    stop = asyncio.Event()
    task = asyncio.create_task(kafka_intents.run_intents(settings, stop))
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()

    async def produce(tx_id: str, body: dict[str, Any]) -> None:
        # The door creates its topics itself; the first send waits for them.
        await producer.send_and_wait(
            settings.topics.intents("acme"),
            key=f"acme/{tx_id}".encode(),
            value=json.dumps(body).encode(),
        )

    try:
        yield produce, task
    finally:
        await producer.stop()
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
