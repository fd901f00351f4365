"""An unreadable record on recon.events is set aside by every at-least-once consumer with
the same dead-letter headers, and nobody stops: the next transaction still commits. A record
whose type header names an event a reader does not act on is passed over by that reader
without being parsed.

One stack for the module (support.stack_fixtures.module_stack): each test writes its record
to a partition and key of its own and counts only the dead letters whose origin header is
that record's offset; the dead-letter topic holds the other test's too."""

import asyncio
import json
import time
from collections import Counter

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import RecordMetadata
from support.recon_client import Recon, transaction
from support.stack_fixtures import module_stack
from support.topic_records import Record, read_records

from events.dead_letters import CONSUMER, ORIGIN, REASON
from events.event_type_header import event_type_header, event_type_of
from events.topics import Topics
from services.devtools.stack import Stack

stack = module_stack
# The groups that read recon.events at least once and set aside what they cannot read.
READERS = ("recon-saga", "recon-projector")


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
    sent = await _write_raw(stack, b"\xff not an envelope", b"demo/poison", partition=1)

    assert (await recon.submit(transaction("after-poison"))).status_code == 202
    tx = await recon.wait_terminal("after-poison")
    assert tx["status"] == "committed", tx

    letters = await _dead_letters_once_read_past(stack, 1, sent.offset)
    # Counted, not collected: a consumer that set the record aside twice is a second
    # dead letter for an operator to chase.
    assert Counter(r.headers[CONSUMER] for r in letters) == {
        f"{stack.topic_prefix}{group}".encode(): 1 for group in READERS
    }
    assert all(r.headers[REASON] and r.value == b"\xff not an envelope" for r in letters)
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

    # The saga passes it over: only the projector sets it aside, once.
    letters = await _dead_letters_once_read_past(stack, 2, sent.offset)
    projector = f"{stack.topic_prefix}recon-projector".encode()
    assert Counter(r.headers[CONSUMER] for r in letters) == {projector: 1}


async def _dead_letters_once_read_past(stack: Stack, partition: int, offset: int) -> list[Record]:
    """Every dead letter of the record at `offset` on recon.events'
    `partition`, once every reader has committed past it. Each acknowledges its dead letter
    before it commits the record's offset (the projector's Kafka commit, its lag marker,
    follows the database's), so by then the topic holds every dead letter they made of it,
    and no more is coming but from a crash (a record read again after one is set aside
    again: at least once)."""
    topics = Topics(stack.topic_prefix)
    tp = TopicPartition(topics.events, partition)
    for group in READERS:
        await _wait_committed_past(stack, f"{stack.topic_prefix}{group}", tp, offset)
    origin = f"{topics.events}:{partition}:{offset}".encode()
    letters = await read_records(stack.kafka_bootstrap, topics.dead_letters)
    return [r for r in letters if r.headers[ORIGIN] == origin]


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
