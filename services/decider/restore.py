"""Restoring the decider's state for one partition from the compacted changelog.

The changelog holds one record per transaction once compacted, so a restore reads
as many records as there are transactions on the partition, not as many as events
were ever written (DESIGN: restore time bounded as history grows).
"""

from aiokafka import AIOKafkaConsumer, TopicPartition

from services.decider.transaction import TransactionState

StateKey = tuple[str, str]


async def restore_partition(
    bootstrap: str, topic: str, partition: int
) -> dict[StateKey, TransactionState]:
    tp = TopicPartition(topic, partition)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",  # a fenced writer's aborted state is invisible
        enable_auto_commit=False,
        group_id=None,
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        # Under read_committed this is the last stable offset: everything committed.
        end = (await consumer.end_offsets([tp]))[tp]
        states: dict[StateKey, TransactionState] = {}
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000, max_records=5000)
            for record in batch.get(tp, []):
                if record.value is None:
                    continue
                state = TransactionState.model_validate_json(record.value)
                states[(state.tenant, state.tx_id)] = state
        return states
    finally:
        await consumer.stop()
