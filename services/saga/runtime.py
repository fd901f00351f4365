"""The saga orchestrator's Kafka runtime.

At-least-once (the shared policy, services.at_least_once), made harmless by the reactor's
deterministic commands: offsets are committed only after every command of the batch is
acknowledged by Kafka, so a crash or a failed send re-delivers the events and the same
commands are issued again, which the decider recognises (same message id; a plan or an
undo already under way).

Each command goes to the partition of the event it answers: recon.commands is
co-partitioned with recon.events, so this is the partition the transaction's decider owns.
"""

import asyncio
import logging
from contextlib import AsyncExitStack

from aiokafka import ConsumerRecord, TopicPartition
from pydantic import ValidationError

from events.envelope import Envelope
from events.event_type_header import passed_over
from events.inputs import Command
from events.keys import partition_key
from services import consumer_groups, tracing
from services.at_least_once import AtLeastOnceConsumer, Batch
from services.closing import stopped_with
from services.config import Settings
from services.crash_points import SAGA_AFTER_COMMANDS_ACKED, pause_point
from services.kafka_clients import acked_producer
from services.kafka_setup import ensure_recon_topics
from services.kafka_start import start_kafka_client
from services.saga.reactor import REACTS_TO, react

log = logging.getLogger(__name__)


class Orchestrator:
    def __init__(self, settings: Settings) -> None:
        self.topics = settings.topics
        self.producer = acked_producer(settings, "saga-producer")
        self.inputs = AtLeastOnceConsumer(
            settings,
            consumer_groups.SAGA,
            consumer_groups.inputs(consumer_groups.SAGA, settings),
            self.producer,
            role="saga-inputs",
            max_records=500,
            batch_wait_s=settings.saga_batch_wait_s,
        )

    async def run(self, stop: asyncio.Event) -> None:
        # Both clients are stopped however the run ends (services.closing): the inputs'
        # consumer too when the producer's start fails, and the consumer first.
        async with AsyncExitStack() as stack:
            stopped_with(stack, self.producer)
            stopped_with(stack, self.inputs.consumer)
            if await start_kafka_client(self.producer, "saga producer", stop):
                await self.inputs.run(stop, self._issue)

    async def _issue(self, batch: Batch) -> None:
        sends: list[asyncio.Future[object]] = []
        for tp, records in batch.items():
            for record in records:
                if passed_over(record.headers, REACTS_TO):
                    continue  # most events call for nothing: passed over unparsed
                with tracing.span(
                    "saga.react",
                    tracing.context_from(record.headers),
                    semantic=tracing.kafka_record(record, self.inputs.group),
                ):
                    await self._issue_one(tp, record, sends)
        await asyncio.gather(*sends)
        await pause_point(SAGA_AFTER_COMMANDS_ACKED, when=bool(sends))

    async def _issue_one(
        self, tp: TopicPartition, record: ConsumerRecord, sends: list[asyncio.Future[object]]
    ) -> None:
        for command in await self._react(tp, record):
            # send() queues in order (the producer is idempotent, so the order
            # holds across its retries); the acks are awaited together below.
            sends.append(
                await self.producer.send(
                    self.topics.commands,
                    value=command.model_dump_json().encode(),
                    key=partition_key(command.tenant, command.tx_id),
                    partition=tp.partition,
                    headers=tracing.kafka_headers(),
                )
            )
            tracing.annotate(tx_id=command.tx_id)
            log.info("%s %s: %s", command.tx_id, command.type, command.message_id)

    async def _react(self, tp: TopicPartition, record: ConsumerRecord) -> list[Command]:
        try:
            envelope = Envelope.model_validate_json(record.value)
            return react(envelope)
        except ValidationError as error:
            # The decider is the only writer of recon.events, so this is a bug upstream;
            # the event stays in the log for the auditor and is set aside with the same
            # headers by every consumer that cannot read it.
            await self.inputs.dead_letter(tp, record, f"unreadable event: {error}")
            return []


async def run_saga(settings: Settings, stop: asyncio.Event) -> None:
    if await ensure_recon_topics(settings, stop=stop):
        await Orchestrator(settings).run(stop)
