"""A decider restores a partition from the compacted changelog: the latest committed
state of each transaction, nothing from aborted transactions."""

from aiokafka import AIOKafkaProducer
from support.txbuilders import observed, submit

from events.inputs import Outcome
from events.keys import partition_key
from events.topics import Topics
from services.decider.restore import restore_partition
from services.kafka_setup import ensure_topics
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state


async def test_restore_keeps_the_latest_committed_state_per_transaction(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    first, _ = handle(initial_state("demo", "tx-1"), submit(["a", "b"]))
    second, _ = handle(first, observed("a", 1, Outcome.SUCCEEDED))
    aborted, _ = handle(second, observed("b", 1, Outcome.SUCCEEDED, 1))
    other, _ = handle(initial_state("demo", "tx-2"), submit(["a"], tx_id="tx-2"))

    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic_prefix}test-restore"
    )
    await producer.start()
    try:
        async with producer.transaction():
            for state in (first, second, other):
                await producer.send(
                    topics.decider_state,
                    key=partition_key("demo", state.tx_id),
                    value=state.model_dump_json().encode(),
                    partition=2,
                )
        await producer.begin_transaction()
        await producer.send(
            topics.decider_state,
            key=partition_key("demo", "tx-1"),
            value=aborted.model_dump_json().encode(),
            partition=2,
        )
        await producer.abort_transaction()
    finally:
        await producer.stop()

    restored = await restore_partition(kafka_bootstrap, topics.decider_state, 2)
    assert restored.states == {("demo", "tx-1"): second, ("demo", "tx-2"): other}
    assert isinstance(restored.states[("demo", "tx-1")], TransactionState)
    assert (await restore_partition(kafka_bootstrap, topics.decider_state, 1)).states == {}
