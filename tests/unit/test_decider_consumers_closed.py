"""The decider's own Kafka clients (its inputs' consumer, the changelog reader, a partition's
restore, its calls' producer) are closed however they end: one made and never stopped is
logged at ERROR ("Unclosed AIOKafkaConsumer") when it is collected, which an operator reads
as a fault at every clean stop of a decider that never read a marker back."""

import asyncio
import gc
import time
from contextlib import AsyncExitStack

import pytest
from aiokafka.errors import KafkaConnectionError
from support.kafka_leaks import unstopped

from events.topics import Topics
from services import kafka_start
from services.config import Settings
from services.decider.dispatch_host import DispatchHost
from services.decider.finished_index import ChangelogReader, FinishedIndex
from services.decider.restore import restore_partition
from services.decider.runtime import Decider, OwnedPartition
from services.kafka_clients import client_id

NOBODY = "127.0.0.1:9"  # nothing listens: a start fails at once


async def _collected(caplog: pytest.LogCaptureFixture) -> str:
    gc.collect()
    await asyncio.sleep(0)  # the loop's exception handler runs the report
    return caplog.text


async def test_a_changelog_reader_that_never_read_closes_its_consumer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = ChangelogReader(NOBODY, "recon.decider-state")
    await reader.stop()
    del reader
    assert "Unclosed AIOKafkaConsumer" not in await _collected(caplog)


async def test_a_restore_whose_start_failed_closes_its_consumer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(KafkaConnectionError):
        await restore_partition(NOBODY, "recon.decider-state", 0)
    assert "Unclosed AIOKafkaConsumer" not in await _collected(caplog)


def _settings(calls: bool) -> Settings:
    return Settings(
        kafka_bootstrap=NOBODY,
        database_url="",
        topics=Topics(""),
        environment="test",
        decider_calls=calls,
    )


def _decider(calls: bool) -> Decider:
    return Decider(_settings(calls))


def _unstopped() -> list[object]:
    roles = ("decider-inputs", "decider-changelog", "decider-calls")
    return [client for role in roles for client in unstopped(client_id(role))]


async def test_a_decider_whose_start_failed_stops_every_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Calls off: the dispatch producer is made and never started. The refused connection is
    # retried as a broker not up yet, for START_TIMEOUT_S (60 s): a second of it is the same
    # path (the wait was a minute of the suite).
    monkeypatch.setattr(kafka_start, "START_TIMEOUT_S", 1.0)
    decider = _decider(calls=False)
    with pytest.raises(KafkaConnectionError):
        await decider.run(asyncio.Event())
    assert _unstopped() == []


async def test_a_decider_stopped_while_the_broker_is_away_stops_every_client() -> None:
    stop = asyncio.Event()
    stop.set()
    decider = _decider(calls=True)
    await decider.run(stop)  # its dispatch producer's start gives up on `stop`
    assert _unstopped() == []


async def test_a_partition_whose_producer_fails_to_start_stops_it() -> None:
    decider = _decider(calls=False)
    try:
        # `failed` holds the failed take's frames, and so its producer, to the test's end.
        with pytest.raises(KafkaConnectionError) as failed:
            await decider.take(0)
        assert unstopped(client_id("decider-transactions")) == [], failed
    finally:
        await decider.stop_clients()


async def test_a_dispatch_host_stopped_while_the_broker_is_away_stops_its_producer() -> None:
    # The host on its own, its stack its caller's (the decider also stops the producer).
    host = DispatchHost(_settings(calls=True), lambda: (), lambda _: None, lambda *_: None)
    stop = asyncio.Event()
    stop.set()
    async with AsyncExitStack() as stack:
        assert not await host.start(stack, stop)
    assert unstopped(client_id("decider-calls")) == []


def _owned(decider: Decider, partition: int) -> OwnedPartition:
    """A partition as a take leaves it, its transactional producer made (here never started:
    stopped or not is the same question)."""
    reader = decider.changelog_reader
    return OwnedPartition(
        decider.transactional_producer(partition), {}, FinishedIndex(reader, 0, {})
    )


async def test_the_producers_of_partitions_still_owned_are_stopped_with_the_decider() -> None:
    # What a rebalance completed by the consumer's own stop hands the decider after its run
    # dropped its partitions (tests/fault/test_decider_stopped_mid_rebalance.py).
    decider = _decider(calls=False)
    decider.owned = {0: _owned(decider, 0), 1: _owned(decider, 1)}
    await decider.stop_clients()
    assert unstopped(client_id("decider-transactions")) == []


async def test_a_partition_whose_drop_is_cancelled_has_its_producer_stopped() -> None:
    # A revocation cut off by the consumer's bounded stop while the partition's transaction
    # has not ended: the partition is out of `owned` by then, nobody else would stop it.
    decider = _decider(calls=False)
    transaction = asyncio.ensure_future(asyncio.sleep(3600))  # on the wire, never ending
    try:
        owned = _owned(decider, 3)
        owned.task_began = time.monotonic()  # as Decider._start does
        owned.task = transaction
        decider.owned = {3: owned}
        dropping = asyncio.ensure_future(decider.drop(3))
        await asyncio.sleep(0.1)
        assert not dropping.done() and 3 not in decider.owned
        dropping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await dropping
        assert unstopped(client_id("decider-transactions")) == []
    finally:
        transaction.cancel()
        await decider.stop_clients()
