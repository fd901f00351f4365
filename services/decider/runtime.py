"""The decider's Kafka runtime.

Consumes recon.commands and recon.observations, runs the pure state machine, and
produces the resulting events, the new state (changelog) and the consumed offsets in
ONE Kafka transaction per partition and batch. Either all of it is visible to
read_committed readers, or none of it is and the inputs are read again.

aiokafka has no KIP-447 (fencing by consumer group metadata), so each input partition
has its own transactional producer, `recon-decider-<p>`: whoever takes partition p
initialises that transactional id, which fences the previous owner's epoch and aborts
its open transaction. The range assignor gives one decider partition p of both input
topics together, so no two deciders ever write one transaction.
"""

import asyncio
import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError, ProducerFenced
from pydantic import ValidationError

from events.inputs import OperationObserved, parse_input
from events.keys import partition_key
from services.config import Settings
from services.crash_points import DECIDER_IN_OPEN_TRANSACTION, pause_point
from services.decider.restore import StateKey, restore_partition
from services.decider.transaction import TransactionState, handle, initial_state
from services.kafka_clients import acked_producer, group_consumer
from services.kafka_setup import ensure_topics

log = logging.getLogger(__name__)


@dataclass
class OwnedPartition:
    producer: AIOKafkaProducer
    states: dict[StateKey, TransactionState] = field(default_factory=dict)


class Decider:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.group_id = f"{settings.group_prefix}recon-decider"
        self.owned: dict[int, OwnedPartition] = {}
        # Held while a batch is processed and while partitions change hands, so a
        # revoked partition is never written after its revocation returns.
        self.lock = asyncio.Lock()
        self.consumer = group_consumer(
            settings, "recon-decider", partition_assignment_strategy=(RangePartitionAssignor,)
        )

    # --- ownership -----------------------------------------------------------------

    async def take(self, partition: int) -> None:
        producer = acked_producer(
            self.settings, transactional_id=f"{self.topics.prefix}recon-decider-{partition}"
        )
        await producer.start()  # init_transactions: fences the previous owner
        try:
            states = await restore_partition(
                self.settings.kafka_bootstrap, self.topics.decider_state, partition
            )
        except BaseException:
            await _stop_quietly(producer)
            raise
        self.owned[partition] = OwnedPartition(producer, states)
        log.info("took partition %d with %d transactions", partition, len(states))

    async def drop(self, partition: int) -> None:
        owned = self.owned.pop(partition, None)
        if owned is not None:
            await _stop_quietly(owned.producer)
            log.info("dropped partition %d", partition)

    async def retake(self, partition: int) -> None:
        """After a failed transaction: forget memory, restore from the log, and read the
        inputs again from the committed offsets. Retries while Kafka is unreachable."""
        await self.drop(partition)
        delay = 0.5
        while True:
            try:
                await self.take(partition)
                for topic in self.topics.decider_inputs():
                    tp = TopicPartition(topic, partition)
                    committed = await self.consumer.committed(tp)
                    if committed is None:
                        await self.consumer.seek_to_beginning(tp)
                    else:
                        self.consumer.seek(tp, committed)
                return
            except KafkaError as error:
                log.warning("retaking partition %d failed (%s); retrying", partition, error)
                await self.drop(partition)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    # --- processing ----------------------------------------------------------------

    async def process(
        self, partition: int, batches: list[tuple[TopicPartition, list[ConsumerRecord]]]
    ) -> None:
        owned = self.owned[partition]
        producer = owned.producer
        # Copy-on-write: memory follows the log only once the transaction commits.
        staged = dict(owned.states)
        offsets: dict[TopicPartition, int] = {}
        async with producer.transaction():
            for tp, records in batches:
                for record in records:
                    await self._decide_one(producer, partition, staged, tp, record)
                offsets[tp] = records[-1].offset + 1
            await producer.send_offsets_to_transaction(offsets, self.group_id)
            await pause_point(DECIDER_IN_OPEN_TRANSACTION, flush=producer.flush)
        owned.states = staged

    async def _decide_one(
        self,
        producer: AIOKafkaProducer,
        partition: int,
        staged: dict[StateKey, TransactionState],
        tp: TopicPartition,
        record: ConsumerRecord,
    ) -> None:
        try:
            message = parse_input(record.value)
        except ValidationError as error:
            await self._dead_letter(producer, tp, record, f"unreadable input: {error}")
            return
        key = (message.tenant, message.tx_id)
        state = staged.get(key) or initial_state(*key)
        if isinstance(message, OperationObserved) and state.status is None:
            await self._dead_letter(producer, tp, record, "observation for an unknown transaction")
            return
        state, envelopes = handle(state, message)
        if not envelopes:
            return
        staged[key] = state
        kafka_key = partition_key(*key)
        for envelope in envelopes:
            await producer.send(
                self.topics.events,
                value=envelope.model_dump_json().encode(),
                key=kafka_key,
                partition=partition,
            )
        await producer.send(
            self.topics.decider_state,
            value=state.model_dump_json().encode(),
            key=kafka_key,
            partition=partition,
        )

    async def _dead_letter(
        self, producer: AIOKafkaProducer, tp: TopicPartition, record: ConsumerRecord, reason: str
    ) -> None:
        log.error("dead-lettering %s:%d@%d: %s", tp.topic, tp.partition, record.offset, reason)
        await producer.send(
            self.topics.dead_letters,
            value=record.value,
            key=record.key,
            headers=[
                ("reason", reason[:2000].encode()),
                ("origin", f"{tp.topic}:{tp.partition}:{record.offset}".encode()),
            ],
        )

    async def run(self, stop: asyncio.Event) -> None:
        self.consumer.subscribe(list(self.topics.decider_inputs()), listener=_Listener(self))
        await self.consumer.start()
        try:
            while not stop.is_set():
                batch = await self.consumer.getmany(timeout_ms=500, max_records=500)
                async with self.lock:
                    await self._process_batch(batch)
        finally:
            async with self.lock:
                for partition in list(self.owned):
                    await self.drop(partition)
            await self.consumer.stop()

    async def _process_batch(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        by_partition: dict[int, list[tuple[TopicPartition, list[ConsumerRecord]]]] = defaultdict(
            list
        )
        # Commands before observations: an observation is always caused by an event
        # that was decided from an earlier command, never the other way round.
        for tp in sorted(batch, key=lambda t: t.topic != self.topics.commands):
            if batch[tp]:
                by_partition[tp.partition].append((tp, batch[tp]))
        for partition, batches in by_partition.items():
            if partition not in self.owned:
                continue  # revoked while fetching; the new owner reads it again
            try:
                await self.process(partition, batches)
            except ProducerFenced:
                log.warning("fenced on partition %d: another decider owns it now", partition)
                await self.drop(partition)
            except (KafkaError, TimeoutError) as error:
                log.warning("transaction on partition %d failed (%r); restoring", partition, error)
                await self.retake(partition)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, decider: Decider) -> None:
        self.decider = decider

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self.decider.lock:
            for partition in {tp.partition for tp in revoked}:
                await self.decider.drop(partition)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        async with self.decider.lock:
            # Concurrently: each take waits on a producer's init and a restore read.
            new = {tp.partition for tp in assigned} - set(self.decider.owned)
            await asyncio.gather(*(self.decider.retake(partition) for partition in new))


async def _stop_quietly(producer: AIOKafkaProducer) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.stop(), 10)


async def run_decider(settings: Settings, stop: asyncio.Event) -> None:
    await ensure_topics(settings.kafka_bootstrap, settings.topics)
    await Decider(settings).run(stop)
