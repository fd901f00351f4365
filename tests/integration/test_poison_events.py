"""An unreadable record on recon.events is set aside by every at-least-once consumer with
the same dead-letter headers, and nobody stops: the next transaction still commits. A record
whose type header names an event a reader does not act on is passed over by that reader
without being parsed.

One stack for the module (support.stack_fixtures.module_stack): each test writes its record
to a partition and key of its own and judges only the dead letters whose origin header is
that record's offset; the dead-letter topic holds the other test's too."""

import asyncio
import json
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import RecordMetadata
from support.recon_client import Recon, transaction
from support.stack_fixtures import module_stack

from events.dead_letters import CONSUMER, ORIGIN, REASON
from events.event_type_header import event_type_header, event_type_of
from events.topics import Topics
from services.devtools.stack import Stack

stack = module_stack


async def _write_raw(
    stack: Stack,
    value: bytes,
    key: bytes,
    *,
    partition: int,
    headers: list[tuple[str, bytes]] | None = None,
) -> RecordMetadata:
    """A record on recon.events written past the decider, as a writer with topic access could."""
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap)
    await producer.start()
    try:
        return await producer.send_and_wait(
            Topics(stack.topic_prefix).events,
            value=value,
            key=key,
            partition=partition,
            headers=headers,
        )
    finally:
        await producer.stop()


async def test_poison_on_the_event_log_is_dead_lettered_once_per_consumer(
    stack: Stack, recon: Recon
) -> None:
    topics = Topics(stack.topic_prefix)
    sent = await _write_raw(stack, b"\xff not an envelope", b"demo/poison", partition=1)

    assert (await recon.submit(transaction("after-poison"))).status_code == 202
    tx = await recon.wait_terminal("after-poison")
    assert tx["status"] == "committed", tx

    origin = f"{topics.events}:1:{sent.offset}".encode()
    groups = {
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
                    if headers[ORIGIN] != origin:
                        continue  # the other test's record
                    assert record.value == b"\xff not an envelope"
                    judged[headers[CONSUMER]] = headers
            await asyncio.sleep(0)
    finally:
        await consumer.stop()
    assert all(h[REASON] for h in judged.values())
    for name in ("saga", "projector"):
        assert stack.processes[name].poll() is None, stack.log_tail(name)


async def test_events_carry_their_type_header_and_readers_pass_over_others_unparsed(
    stack: Stack, recon: Recon
) -> None:
    # An unreadable record whose type header names an event the saga does not act on: it
    # passes over it without parsing (so it does not dead-letter it), the projector, which
    # decodes every event, sets it aside.
    topics = Topics(stack.topic_prefix)
    sent = await _write_raw(
        stack,
        b"\xff typed, not an envelope",
        b"demo/typed-poison",
        partition=2,
        headers=[event_type_header("OperationConfirmed")],
    )

    assert (await recon.submit(transaction("after-typed-poison"))).status_code == 202
    tx = await recon.wait_terminal("after-typed-poison")
    assert tx["status"] == "committed", tx

    # Every event the decider wrote names its own type in the header.
    reader = AIOKafkaConsumer(
        topics.events,
        bootstrap_servers=stack.kafka_bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    await reader.start()
    typed: list[tuple[str | None, str]] = []
    try:
        deadline = time.monotonic() + 60
        while not any(t == "TransactionCommitted" for _, t in typed):
            assert time.monotonic() < deadline, f"events read: {typed}"
            for records in (await reader.getmany(timeout_ms=500)).values():
                for record in records:
                    if record.key == b"demo/after-typed-poison":
                        named = event_type_of(record.headers)
                        typed.append((named, json.loads(record.value)["type"]))
    finally:
        await reader.stop()
    assert typed and all(named == actual for named, actual in typed), typed

    # Once the saga committed past the record, anything it set aside is on the dead-letter
    # topic (a dead letter is acknowledged before the offset).
    tp = TopicPartition(topics.events, 2)
    for group in ("recon-saga",):
        await _wait_committed_past(stack, f"{stack.topic_prefix}{group}", tp, sent.offset)
    origin = f"{topics.events}:2:{sent.offset}".encode()
    judged: set[bytes] = set()
    projector = f"{stack.topic_prefix}recon-projector".encode()
    consumer = AIOKafkaConsumer(
        topics.dead_letters, bootstrap_servers=stack.kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + 60
        while projector not in judged:
            assert time.monotonic() < deadline, f"dead-lettered by {judged} only"
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    headers = dict(record.headers)
                    if headers[ORIGIN] == origin:
                        judged.add(headers[CONSUMER])
    finally:
        await consumer.stop()
    assert judged == {projector}


async def _wait_committed_past(stack: Stack, group: str, tp: TopicPartition, offset: int) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=stack.kafka_bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + 60
        while ((await consumer.committed(tp)) or 0) <= offset:
            assert time.monotonic() < deadline, f"{group} did not commit past {tp}@{offset}"
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()
