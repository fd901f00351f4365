"""Finished transactions shrink to a marker on the changelog: a restore reads full state
only for the live ones, and a duplicate SubmitTransaction of a finished transaction, read
by a decider that restored from that changelog, starts nothing (promise 1)."""

import json
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from support.decider_support import event_types, eventually, lone_decider, produce
from support.failing_start import StartRefused, fail_start
from support.kafka_leaks import unstopped
from support.topic_records import read_records
from support.txbuilders import observed, submit

from events.inputs import Outcome
from events.keys import partition_key
from events.topics import Topics
from services.decider.finished_index import ChangelogReader, FinishedIndex
from services.decider.restore import CorruptChangelog, restore_partition
from services.kafka_clients import client_id
from services.kafka_setup import ensure_topics
from transactions.finished import FinishedTransaction, finish
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state

PARTITION = 0
FINISHED = [f"done-{i}" for i in range(6)]
DONE_TYPES = ["TransactionAccepted", "OperationDispatched", "OperationConfirmed"]


async def test_restore_reads_only_live_state_and_a_finished_transaction_never_starts_again(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    commands = [submit(["a"], tx_id=tx_id) for tx_id in FINISHED]
    await produce(
        kafka_bootstrap, topics.commands, [*commands, submit(["a"], tx_id="live-1")], PARTITION
    )

    async with lone_decider(kafka_bootstrap, topic_prefix, tmp_path) as stack:

        async def all_dispatched() -> bool | None:
            found = await read_records(kafka_bootstrap, topics.events)
            dispatched = [r for r in found if b'"OperationDispatched"' in (r.value or b"")]
            return True if len(dispatched) == len(FINISHED) + 1 else None

        await eventually(all_dispatched, "every transaction's step dispatched")
        # The dispatcher's part: the provider confirmed the step of every done-* one.
        await produce(
            kafka_bootstrap,
            topics.observations,
            [observed("a", 1, Outcome.SUCCEEDED, tx_id=tx_id) for tx_id in FINISHED],
            PARTITION,
        )

        async def all_committed() -> bool | None:
            types = [await event_types(kafka_bootstrap, topics, tx_id) for tx_id in FINISHED]
            return True if all("TransactionCommitted" in t for t in types) else None

        await eventually(all_committed, "every done-* transaction commits")
        stack.kill("decider")

        restored = await restore_partition(kafka_bootstrap, topics.decider_state, PARTITION)
        assert restored.live == 1 and len(restored.finished) == len(FINISHED)
        assert isinstance(restored.states[("demo", "live-1")], TransactionState)
        # What compaction keeps of a finished transaction is its small marker, and the
        # restore keeps only where it is: the latest record under the transaction's key.
        changelog = await read_records(kafka_bootstrap, topics.decider_state)
        last = {r.key: r for r in changelog}
        for tx_id in FINISHED:
            key = partition_key("demo", tx_id)
            assert restored.finished[key] == last[key].offset
            value = last[key].value
            assert value is not None and len(value) < 600, value
            marker = FinishedTransaction.model_validate_json(value)
            assert marker.tx_id == tx_id and marker.status == "committed"

        # A new decider restores from the markers, then reads the same intent again,
        # once as the very same command and once as a new one (a replay, a duplicate).
        stack.start("decider")
        again = commands[0].model_copy(update={"message_id": "cmd-done-0-again"})
        await produce(
            kafka_bootstrap,
            topics.commands,
            [commands[0], again, submit(["a"], tx_id="after-1")],
            PARTITION,
        )

        async def after_dispatched() -> bool | None:
            types = await event_types(kafka_bootstrap, topics, "after-1")
            return True if "OperationDispatched" in types else None

        # Same partition, in order: once after-1 is decided, so are both duplicates.
        await eventually(after_dispatched, "the transaction behind the duplicates is decided")
        log = stack.log_tail("decider", 400)
    assert f"took partition {PARTITION} with 7 transactions (1 live, 6 finished)" in log, log
    assert await event_types(kafka_bootstrap, topics, "done-0") == [
        *DONE_TYPES,
        "TransactionCommitted",
    ]


def committed(tx_id: str) -> TransactionState:
    """The full state of a one-step transaction that committed."""
    done = initial_state("demo", tx_id)
    for message in (submit(["a"], tx_id=tx_id), observed("a", 1, Outcome.SUCCEEDED, tx_id=tx_id)):
        done, _ = handle(done, message)
    return done


async def test_a_finished_full_state_from_before_markers_is_rewritten_as_a_marker(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    done = committed("old-1")
    assert done.status == "committed"
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            topics.decider_state,
            key=partition_key("demo", "old-1"),
            value=done.model_dump_json().encode(),
            partition=PARTITION,
        )
    finally:
        await producer.stop()

    restored = await restore_partition(kafka_bootstrap, topics.decider_state, PARTITION)
    assert list(restored.legacy) == [("demo", "old-1")] and not restored.finished

    async with lone_decider(kafka_bootstrap, topic_prefix, tmp_path) as stack:

        async def rewritten() -> bool | None:
            log = stack.log_tail("decider", 400)
            return True if f"partition {PARTITION}: 1 finished states rewritten" in log else None

        await eventually(rewritten, "the decider rewrites the old full state as a marker")
    changelog = await read_records(kafka_bootstrap, topics.decider_state)
    [*_, latest] = [r for r in changelog if r.key == partition_key("demo", "old-1")]
    assert latest.value is not None and json.loads(latest.value)["kind"] == "finished"
    again = await restore_partition(kafka_bootstrap, topics.decider_state, PARTITION)
    assert not again.legacy and again.finished == {partition_key("demo", "old-1"): latest.offset}


async def test_a_marker_is_read_back_by_its_offset_and_a_bad_offset_fails_the_batch(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    """What the decider does with a finished transaction a late input arrives for
    (services.decider.finished_index): the marker at the indexed offset; an offset that
    holds something else, or nothing, fails the batch with an error the decider answers
    by restoring the partition (never a wait without end, never a wrong state)."""
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    done = committed("old-2")
    marker = finish(done)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        key = partition_key("demo", "old-2")
        at = await producer.send_and_wait(
            topics.decider_state, marker.model_dump_json().encode(), key, partition=PARTITION
        )
        garbage = await producer.send_and_wait(
            topics.decider_state, b'{"kind":"finished", broken', key, partition=PARTITION
        )
    finally:
        await producer.stop()
    reader = ChangelogReader(kafka_bootstrap, topics.decider_state)
    try:
        index = FinishedIndex(reader, PARTITION, {key: at.offset})
        assert await index.get(key) == marker
        assert await FinishedIndex(reader, PARTITION, {}).get(key) is None
        with pytest.raises(CorruptChangelog):
            await FinishedIndex(reader, PARTITION, {key: garbage.offset}).get(key)
        with pytest.raises(KafkaError):  # past the end: OffsetOutOfRange
            await FinishedIndex(reader, PARTITION, {key: garbage.offset + 100}).get(key)
    finally:
        await reader.stop()


async def test_a_changelog_reader_whose_start_failed_reads_with_a_new_consumer(
    kafka_bootstrap: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start that fails part-way fails the batch (restored, read again): the next read
    must not start that consumer again, which aiokafka refuses with an AssertionError the
    decider does not survive; the failed one is stopped."""
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    marker = finish(committed("old-3"))
    key = partition_key("demo", "old-3")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        at = await producer.send_and_wait(
            topics.decider_state, marker.model_dump_json().encode(), key, partition=PARTITION
        )
    finally:
        await producer.stop()
    reader = ChangelogReader(kafka_bootstrap, topics.decider_state)
    try:
        fail_start(monkeypatch, "decider-changelog")
        with pytest.raises(StartRefused):
            await FinishedIndex(reader, PARTITION, {key: at.offset}).get(key)
        monkeypatch.undo()  # the broker is back
        assert await FinishedIndex(reader, PARTITION, {key: at.offset}).get(key) == marker
        assert unstopped(client_id("decider-changelog")) == [reader.consumer]
    finally:
        await reader.stop()
    assert unstopped(client_id("decider-changelog")) == []
