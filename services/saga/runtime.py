"""The saga orchestrator's Kafka runtime.

At-least-once, made harmless by the reactor's deterministic commands: offsets are
committed only after every command of the batch is acknowledged by Kafka, so a crash or a
failed send re-delivers the events and the same commands are issued again, which the
decider recognises (same message id; a plan or an undo already under way).

Each command goes to the partition of the event it answers: recon.commands is
co-partitioned with recon.events, so this is the partition the transaction's decider owns.
"""

import asyncio
import logging

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from events.envelope import Envelope
from events.inputs import Command
from events.keys import partition_key
from services.config import Settings
from services.crash_points import SAGA_AFTER_COMMANDS_ACKED, pause_point
from services.kafka_clients import acked_producer, group_consumer
from services.kafka_setup import ensure_topics
from services.saga.reactor import react

log = logging.getLogger(__name__)

Batch = dict[TopicPartition, list[ConsumerRecord]]


class Orchestrator:
    def __init__(self, settings: Settings) -> None:
        self.topics = settings.topics
        # read_committed: an aborted decision never starts a compensation.
        self.consumer = group_consumer(settings, "recon-saga")
        self.producer = acked_producer(settings)

    async def run(self, stop: asyncio.Event) -> None:
        await self.producer.start()
        self.consumer.subscribe([self.topics.events])
        await self.consumer.start()
        try:
            while not stop.is_set():
                batch = await self.consumer.getmany(timeout_ms=500, max_records=500)
                if not batch:
                    continue
                try:
                    await self._issue(batch)
                    await self.consumer.commit(
                        {tp: records[-1].offset + 1 for tp, records in batch.items() if records}
                    )
                except KafkaError as error:
                    # A command or the offset commit did not reach Kafka. Offsets are
                    # committed batch by batch, so the batch's first offsets are the
                    # committed ones: read it again and issue the same commands again.
                    log.warning("batch failed (%r); re-reading it", error)
                    for tp, records in batch.items():
                        if records:
                            self.consumer.seek(tp, records[0].offset)
                    await asyncio.sleep(1.0)
        finally:
            await self.consumer.stop()
            await self.producer.stop()

    async def _issue(self, batch: Batch) -> None:
        sends: list[asyncio.Future[object]] = []
        for tp, records in batch.items():
            for record in records:
                for command in self._react(tp, record):
                    # send() queues in order (the producer is idempotent, so the order
                    # holds across its retries); the acks are awaited together below.
                    sends.append(
                        await self.producer.send(
                            self.topics.commands,
                            value=command.model_dump_json().encode(),
                            key=partition_key(command.tenant, command.tx_id),
                            partition=tp.partition,
                        )
                    )
                    log.info("%s %s: %s", command.tx_id, command.type, command.message_id)
        await asyncio.gather(*sends)
        await pause_point(SAGA_AFTER_COMMANDS_ACKED, when=bool(sends))

    def _react(self, tp: TopicPartition, record: ConsumerRecord) -> list[Command]:
        try:
            envelope = Envelope.model_validate_json(record.value)
            return react(envelope)
        except ValidationError:
            # The decider is the only writer of recon.events, so this is a bug upstream;
            # the event stays in the log for the auditor, and the dispatcher and
            # projector judge it the same way.
            log.error(
                "unreadable event at %s:%d@%d, skipped", tp.topic, tp.partition, record.offset
            )
            return []


async def run_saga(settings: Settings, stop: asyncio.Event) -> None:
    await ensure_topics(settings.kafka_bootstrap, settings.topics)
    await Orchestrator(settings).run(stop)
