"""A decider transaction's records for one partition go out in one batch
(services.decider.runtime, Decider.transactional_producer): a send that meets a full batch
waits for it to be written, which split a transaction into several rounds of
AddPartitionsToTxn, the broker's verification and Produce. No broker is needed: the records
are added to the producer's accumulator, where a full batch would make the add wait."""

import asyncio

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.producer.message_accumulator import MessageAccumulator

from events.topics import Topics
from services.config import Settings
from services.decider.runtime import MAX_RECORD_BYTES, Decider

TOPICS = Topics("")


def _decider() -> Decider:
    return Decider(
        Settings(kafka_bootstrap="127.0.0.1:9", database_url="", topics=TOPICS, environment="test")
    )


def _accumulator(producer: AIOKafkaProducer) -> MessageAccumulator:
    accumulator: MessageAccumulator = producer._message_accumulator
    # Adding partitions to the transaction is the sender's part, and needs a broker.
    accumulator._txn_manager = None
    return accumulator


async def test_a_transactions_states_for_one_partition_fit_one_batch() -> None:
    decider = _decider()
    producer = decider.transactional_producer(0)
    accumulator = _accumulator(producer)
    tp = TopicPartition(TOPICS.decider_state, 0)
    # A c30 transaction carries 6-12 inputs, each a ~2.3 KiB state and its events: 40 records
    # of 4 KiB is several of them, 10x aiokafka's default batch.
    for i in range(40):
        await asyncio.wait_for(
            accumulator.add_message(tp, f"k{i}".encode(), b"x" * 4096, timeout=1.0), 0.5
        )
    assert len(accumulator._batches[tp]) == 1
    await producer.stop()
    await decider.stop_clients()


async def test_no_batch_exceeds_the_largest_record_the_decider_writes() -> None:
    """So a topic that takes every record the decider may write takes every batch: a
    record that would take the batch over the bound waits for the next one."""
    decider = _decider()
    producer = decider.transactional_producer(0)
    accumulator = _accumulator(producer)
    tp = TopicPartition(TOPICS.events, 0)
    await accumulator.add_message(tp, None, b"x" * (MAX_RECORD_BYTES // 2), timeout=1.0)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(
            accumulator.add_message(tp, None, b"x" * (MAX_RECORD_BYTES // 2), timeout=5.0), 0.3
        )
    await producer.stop()
    await decider.stop_clients()
