"""A decider process alone on real Kafka, fed and read directly through its topics.

The tests that use it play every other part themselves (the intake's commands, the providers'
observations: the decider's own calls are off, RECON_DECIDER_CALLS), so they control exactly
what the decider reads and when.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata

from events.inputs import DeciderInput
from events.keys import partition_key
from events.topics import Topics
from services.config import Settings
from services.decider.restore import restore_partition
from services.devtools.stack import Stack
from services.kafka_setup import ensure_topics
from support.topic_records import read_records

T = TypeVar("T")


async def in_process(bootstrap: str, topics: Topics) -> Settings:
    """The settings of a decider run in the test's own process, its calls off, once its
    topics exist."""
    await ensure_topics(bootstrap, topics)
    return Settings(
        kafka_bootstrap=bootstrap,
        database_url="postgresql://unused",  # without its calls the decider uses no Postgres
        topics=topics,
        environment="test",
        decider_calls=False,
    )


@asynccontextmanager
async def lone_decider(bootstrap: str, topic_prefix: str, log_dir: Path) -> AsyncIterator[Stack]:
    """One `python -m services.decider` process; the other services are not started."""
    stack = Stack(
        kafka_bootstrap=bootstrap,
        database_url="postgresql://unused",  # without its calls the decider uses no Postgres
        log_dir=log_dir,
        topic_prefix=topic_prefix,
        migrate=False,  # so there is no database to migrate
        extra_env={"RECON_DECIDER_CALLS": "off"},
    )
    stack.start("decider")
    try:
        yield stack
    finally:
        for name in list(stack.processes):
            if stack.processes[name].poll() is None:
                stack.stop(name)
        print(f"--- decider ---\n{stack.log_tail('decider', 30)}")


async def produce(
    bootstrap: str, topic: str, messages: list[DeciderInput], partition: int
) -> list[int]:
    """Send each input to one partition, as the intake would; returns their offsets."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        offsets = []
        for message in messages:
            meta = await producer.send_and_wait(
                topic,
                value=message.model_dump_json().encode(),
                key=partition_key(message.tenant, message.tx_id),
                partition=partition,
            )
            offsets.append(meta.offset)
        return offsets
    finally:
        await producer.stop()


async def event_types(bootstrap: str, topics: Topics, tx_id: str) -> list[str]:
    """The types of one transaction's events on recon.events, in order."""
    return [
        json.loads(r.value)["type"]
        for r in await read_records(bootstrap, topics.events)
        if r.value is not None and json.loads(r.value)["tx_id"] == tx_id
    ]


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 60) -> T:
    """The probe's first answer that is neither None nor False (a probe written as a plain
    comparison would otherwise end the wait at its first look), or a failure naming what
    never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await probe()
        if found is not None and found is not False:
            return found
        await asyncio.sleep(0.3)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


async def changelog_offsets(bootstrap: str, topics: Topics, partition: int) -> dict[str, int]:
    """Input topic -> next offset to decide, as the decider's changelog holds it: where a
    decider that takes `partition` reads from (services.decider.input_offsets)."""
    restored = await restore_partition(bootstrap, topics.decider_state, partition)
    return {tp.topic: offset for tp, offset in restored.offsets.items()}


async def group_offsets(bootstrap: str, group: str, partition: int) -> dict[str, OffsetAndMetadata]:
    """Input topic -> what the consumer group has committed for `partition`, with metadata."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.topic: meta for tp, meta in committed.items() if tp.partition == partition}
