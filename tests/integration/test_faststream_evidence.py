"""What FastStream 0.7 (faststream[kafka], dev group only) does with offsets and rebalances,
against the real broker: the evidence behind README "At-least-once consumers", which says
which of recon's rules FastStream carries and which it does not.

Each test names the behaviour it shows. A second member joins the group with a client id
that sorts first ("0-..."), so aiokafka's round-robin assignor gives it partition 0 and
leaves partition 1 to the FastStream subscriber ("z-..."): the tests know which partition
is revoked without guessing.
"""

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from faststream.kafka.subscriber.usecase import DefaultSubscriber

from services.at_least_once import RETRY_BACKOFF_S

TIMEOUT_S = 30.0


class Recorder(logging.Handler):
    """Keeps what FastStream logs, so a test can tell "only logged" from "raised"."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Setup:
    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.topic = f"{prefix}faststream-{uuid.uuid4().hex[:6]}"
        self.group = f"{prefix}faststream-group"
        self.p0 = TopicPartition(self.topic, 0)
        self.p1 = TopicPartition(self.topic, 1)
        self.log = Recorder()
        logger = logging.getLogger(f"faststream-evidence-{uuid.uuid4().hex[:6]}")
        logger.addHandler(self.log)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        self.broker = KafkaBroker(bootstrap, client_id="z-faststream", logger=logger)

    def subscriber(self, ack_policy: AckPolicy, **options: Any) -> DefaultSubscriber:
        subscriber = self.broker.subscriber(
            self.topic,
            group_id=self.group,
            auto_offset_reset="earliest",
            ack_policy=ack_policy,
            **options,
        )
        assert isinstance(subscriber, DefaultSubscriber)
        return subscriber

    async def produce(self, partition: int, *values: bytes) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(self.topic, value, partition=partition)
        finally:
            await producer.stop()

    async def committed(self) -> dict[TopicPartition, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(self.group)
        finally:
            await admin.close()
        return {tp: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}

    @contextlib.asynccontextmanager
    async def second_member(self) -> AsyncIterator[list[ConsumerRecord]]:
        """A plain aiokafka member of the same group that takes partition 0 and keeps
        what it reads (it never commits: its reads show where the group's offset was)."""
        consumer = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id="0-second-member",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        read: list[ConsumerRecord] = []

        async def poll() -> None:
            while True:
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    read.extend(records)

        task = asyncio.create_task(poll())
        try:
            yield read
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await consumer.stop()


@pytest.fixture
async def setup(kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[Setup]:
    s = Setup(kafka_bootstrap, topic_prefix)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(s.topic, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()
    try:
        yield s
    finally:
        await s.broker.stop()


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def wait_for(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def revoked(subscriber: DefaultSubscriber, tp: TopicPartition) -> Callable[[], bool]:
    """The rebalance is over and `tp` went to the other member."""

    def check() -> bool:
        consumer = subscriber.consumer
        return (
            consumer is not None
            and bool(consumer.assignment())
            and (tp not in consumer.assignment())
        )

    return check


def counting_commits(subscriber: DefaultSubscriber) -> list[Any]:
    """Every commit request the subscriber's consumer makes, with its arguments."""
    consumer = subscriber.consumer
    assert consumer is not None
    calls: list[Any] = []
    commit = consumer.commit

    async def counted(*args: Any, **kwargs: Any) -> None:
        calls.append((args, kwargs))
        await commit(*args, **kwargs)

    consumer.commit = counted
    return calls


async def test_faststream_ack_is_one_commit_request_per_message(setup: Setup) -> None:
    """AckPolicy.ACK commits after every message (batch=True: after every batch): there is
    no interval to gather commits, recon's COMMIT_INTERVAL_S has no FastStream setting."""
    subscriber = setup.subscriber(AckPolicy.ACK)
    handled: list[bytes] = []

    @subscriber
    async def handle(body: bytes) -> None:
        handled.append(body)

    await setup.broker.start()
    commits = counting_commits(subscriber)
    await setup.produce(1, *[b"m%d" % i for i in range(5)])
    await wait_until(lambda: len(handled) == 5, "five messages handled")
    await wait_for(lambda: _committed_is(setup, setup.p1, 5), "the fifth commit")
    # One request per message, each without offsets: "every consumed position".
    assert len(commits) == 5
    assert all(call == ((), {}) for call in commits)


async def test_faststream_default_ack_policy_commits_a_message_still_in_hand(
    setup: Setup,
) -> None:
    """Without `ack_policy`, a Kafka subscriber is AckPolicy.ACK_FIRST, which turns on
    aiokafka's auto-commit: the message's offset is committed while its handler still runs,
    so a crash then loses it (at most once). recon's consumers would each need an explicit
    policy."""
    subscriber = setup.broker.subscriber(
        setup.topic, group_id=setup.group, auto_offset_reset="earliest"
    )
    release = asyncio.Event()
    handled: list[bytes] = []

    @subscriber
    async def handle(body: bytes) -> None:
        handled.append(body)
        await release.wait()
        handled.append(b"returned")

    await setup.broker.start()
    await setup.produce(1, b"in hand")
    await wait_until(lambda: handled == [b"in hand"], "the message in hand")
    await wait_for(lambda: _committed_is(setup, setup.p1, 1), "the auto-commit")
    assert handled == [b"in hand"]  # committed before the handler returned
    release.set()
    await wait_until(lambda: handled == [b"in hand", b"returned"], "the handler done")


async def test_faststream_ack_leaves_out_a_partition_revoked_under_the_handler(
    setup: Setup,
) -> None:
    """The ack is aiokafka's `commit()` without offsets, which commits the consumed position
    of the partitions assigned *now*: a partition revoked while its message was being
    handled is left out (its new owner reads the message again), never committed."""
    subscriber = setup.subscriber(AckPolicy.ACK)
    handled: list[bytes] = []
    release = asyncio.Event()

    @subscriber
    async def handle(body: bytes) -> None:
        handled.append(body)
        await release.wait()

    await setup.broker.start()
    commits = counting_commits(subscriber)
    await setup.produce(0, b"first")
    await wait_until(lambda: handled == [b"first"], "the message on partition 0 in hand")
    async with setup.second_member() as second_read:
        await wait_until(revoked(subscriber, setup.p0), "partition 0 revoked")
        release.set()
        await wait_until(lambda: len(commits) == 1, "the ack's commit")
        # The new owner reads the message the first member handled: nothing committed it.
        await wait_until(lambda: [r.value for r in second_read] == [b"first"], "a re-read")
        assert setup.p0 not in await setup.committed()
        # The partition it kept is committed by the next ack as usual.
        await setup.produce(1, b"second")
        await wait_for(lambda: _committed_is(setup, setup.p1, 1), "partition 1 committed")
        assert setup.p0 not in await setup.committed()


async def test_faststream_nack_seek_on_a_revoked_partition_is_only_logged(
    setup: Setup,
) -> None:
    """AckPolicy.NACK_ON_ERROR rewinds with `consumer.seek`; on a partition revoked under
    the handler the seek raises IllegalStateError, which FastStream's acknowledgement
    middleware logs at CRITICAL and swallows (so does a failed ack's commit: the same
    `__do_with_logging`). The handler is not told; the subscriber goes on. Harmless for
    at-least-once (the new owner reads from the last commit), but no hook like recon's
    `on_rewind`, and no back-off: a rewound message is read again at once."""
    subscriber = setup.subscriber(AckPolicy.NACK_ON_ERROR)
    handled: list[bytes] = []
    release = asyncio.Event()

    @subscriber
    async def handle(body: bytes) -> None:
        handled.append(body)
        if body == b"fails":
            await release.wait()
            raise RuntimeError("a send was not acknowledged")

    await setup.broker.start()
    await setup.produce(0, b"fails")
    await wait_until(lambda: handled == [b"fails"], "the failing message in hand")
    async with setup.second_member() as second_read:
        await wait_until(revoked(subscriber, setup.p0), "partition 0 revoked")
        release.set()
        await wait_until(
            lambda: any(
                r.levelno == logging.CRITICAL and "IllegalStateError" in r.getMessage()
                for r in setup.log.records
            ),
            "the failed seek logged",
        )
        # Not raised: the subscriber still handles what its remaining partition brings.
        await setup.produce(1, b"next")
        await wait_until(lambda: handled == [b"fails", b"next"], "the next message handled")
        await wait_until(lambda: [r.value for r in second_read] == [b"fails"], "a re-read")


async def test_faststream_nack_reads_the_message_again_at_once_without_a_back_off(
    setup: Setup,
) -> None:
    """AckPolicy.NACK_ON_ERROR seeks back and the consume loop reads the message again at
    once: five failures take less than recon's first four back-offs together (0.5 + 1 + 2 +
    5 s, services/at_least_once.py), so a dependency that is down is asked in a hot loop."""
    subscriber = setup.subscriber(AckPolicy.NACK_ON_ERROR)
    attempts: list[float] = []

    @subscriber
    async def handle(body: bytes) -> None:
        attempts.append(time.monotonic())
        if len(attempts) <= 5:
            raise RuntimeError("a send was not acknowledged")

    await setup.broker.start()
    await setup.produce(1, b"retried")
    await wait_until(lambda: len(attempts) == 6, "five failures and the success")
    assert attempts[5] - attempts[0] < sum(RETRY_BACKOFF_S)
    await wait_for(lambda: _committed_is(setup, setup.p1, 1), "the success committed")


async def test_faststream_rebalance_listener_reaches_the_consumer_through_its_subscriber(
    setup: Setup,
) -> None:
    """FastStream passes its `listener=` nothing but the partitions, and the listener is
    built before the consumer exists; but `subscriber.consumer` is public once the broker
    started, and a manual-ack handler gets the consumer as `msg.consumer`. So recon's rule
    "commit what is done for the revoked partitions, before they go" can be written with
    AckPolicy.MANUAL: explicit offsets, committed from the listener."""
    pending: dict[TopicPartition, int] = {}
    handed: list[Any] = []

    class CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            offsets = {tp: o for tp, o in pending.items() if tp in revoked}
            if offsets and subscriber.consumer is not None:
                await subscriber.consumer.commit(offsets)

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            pass

    subscriber = setup.subscriber(AckPolicy.MANUAL, listener=CommitOnRevoke())

    @subscriber
    async def handle(body: bytes, msg: KafkaMessage) -> None:
        record = msg.raw_message
        assert isinstance(record, ConsumerRecord)
        handed.append(msg.consumer)
        pending[TopicPartition(record.topic, record.partition)] = record.offset + 1

    await setup.broker.start()
    await setup.produce(0, b"done")
    await wait_until(lambda: pending.get(setup.p0) == 1, "the message handled, not committed")
    assert setup.p0 not in await setup.committed()  # MANUAL: nothing committed by itself
    assert handed == [subscriber.consumer]
    async with setup.second_member() as second_read:
        await wait_until(revoked(subscriber, setup.p0), "partition 0 revoked")
        await setup.produce(0, b"after")
        # The listener committed before the hand-over: the new owner starts after "done".
        await wait_until(lambda: [r.value for r in second_read] == [b"after"], "its read")
        assert (await setup.committed())[setup.p0] == 1


async def test_faststream_broker_runs_inside_recons_lifecycle_without_its_app(
    setup: Setup,
) -> None:
    """No second lifecycle is needed: the broker starts and stops from a recon `main(settings,
    stop)` (services/lifecycle.py) without FastStream's application or CLI, and a clean stop
    leaves the group (its offsets committed by the acks)."""
    subscriber = setup.subscriber(AckPolicy.ACK)
    handled: list[bytes] = []

    @subscriber
    async def handle(body: bytes) -> None:
        handled.append(body)

    stop = asyncio.Event()

    async def main() -> None:  # the shape of services.lifecycle.Main, settings aside
        await setup.broker.start()
        try:
            await stop.wait()
        finally:
            await setup.broker.stop()

    running = asyncio.create_task(main())
    await setup.produce(1, b"one")
    await wait_until(lambda: handled == [b"one"], "the message handled")
    stop.set()
    await asyncio.wait_for(running, TIMEOUT_S)
    assert subscriber.consumer is None
    assert (await setup.committed())[setup.p1] == 1
    await wait_for(lambda: _group_is_empty(setup), "the group empty after the stop")


async def _committed_is(setup: Setup, tp: TopicPartition, offset: int) -> bool:
    return (await setup.committed()).get(tp) == offset


async def _group_is_empty(setup: Setup) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=setup.bootstrap)
    await admin.start()
    try:
        described = (await admin.describe_consumer_groups([setup.group]))[0].groups[0]
    finally:
        await admin.close()
    # DescribeGroups: (error_code, group, state, protocol_type, protocol, members, ...)
    return str(described[2]) == "Empty" and len(described[5]) == 0
