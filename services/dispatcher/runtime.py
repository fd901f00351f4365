"""The dispatcher's Kafka runtime.

At-least-once by design, made safe by keys and lookups (the shared policy,
services.at_least_once): offsets are committed only after every observation of the batch is
acknowledged by Kafka, so a crash re-delivers the dispatch. A dispatch is a redelivery when
its call was begun before (services.dispatcher.calls_begun, a durable record written right
before every provider call), not when its offset is old: a redelivery and any later attempt
look up before they apply, and a dispatch nobody got as far as calling is sent as a first
send, even on a provider that cannot be asked. A dispatch whose attempt the projection
proves over is not acted on at all. What one call does is decided by the pure plan of
services.dispatcher.call_plan; services.dispatcher.executor runs it.
"""

import asyncio
import logging

from aiokafka import ConsumerRecord, TopicPartition
from pydantic import ValidationError

from events.envelope import Envelope
from events.event_type_header import passed_over
from events.inputs import OperationObserved
from events.keys import partition_key
from events.transaction_events import OperationDispatched
from services import tracing
from services.at_least_once import AtLeastOnceConsumer, Batch, RetryBatch
from services.config import Settings
from services.dispatcher.executor import DispatchOrder, Executor
from services.dispatcher.gatekeeper import Gatekeeper
from services.dispatcher.in_flight import Projection, ProjectionUnavailable, over_because
from services.governance.store import Held
from services.kafka_clients import acked_producer
from services.kafka_setup import ensure_topics
from services.kafka_start import start_kafka_client
from services.providers.http import ProviderHttp
from services.providers.registry import Accounts, build_accounts

log = logging.getLogger(__name__)

Dispatch = tuple[TopicPartition, ConsumerRecord, Envelope, OperationDispatched]


class Dispatcher:
    def __init__(self, settings: Settings, accounts: Accounts, projection: Projection) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.accounts = accounts
        self.projection = projection
        # Dispatches not acted on because their attempt was over (a reset group re-reading).
        self.skipped = 0
        self.producer = acked_producer(settings)
        # Kill switches, grants and quotas, checked right before each provider call.
        self.gate = Gatekeeper(settings, self.producer)
        # The call plan's executor; its observations go to recon.observations (`observed`).
        self.executor = Executor(accounts, self.gate, self)
        self.inputs = AtLeastOnceConsumer(
            settings,
            "recon-dispatcher",
            [self.topics.events],
            self.producer,
            max_records=200,
        )

    async def run(self, stop: asyncio.Event) -> None:
        if not await start_kafka_client(self.producer, "dispatcher producer", stop):
            return
        gate = asyncio.create_task(self.gate.run(stop, self._resume))
        try:
            await self.inputs.run(stop, self._handle_batch)
        finally:
            stop.set()
            await gate
            await self.gate.close()
            await self.producer.stop()

    async def _resume(self, released: list[Held]) -> None:
        """Dispatch what a kill switch held, now released, through the gate again. A row
        claimed again (a dispatcher died after its call and before forgetting the hold) is a
        redelivery exactly when its call was begun: the call plan asks the durable record."""
        items: list[tuple[Held, Envelope, OperationDispatched]] = []
        for held in released:
            env = Envelope.model_validate_json(held.envelope)
            dispatch = env.event()
            assert isinstance(dispatch, OperationDispatched)
            items.append((held, env, dispatch))
        projected = await self.projection.operations(
            (env.tenant, env.tx_id, d.action) for _, env, d in items
        )

        async def one(held: Held, env: Envelope, dispatch: OperationDispatched) -> None:
            reason = over_because(dispatch, projected.get((env.tenant, env.tx_id, dispatch.action)))
            if reason is None:
                await self.executor.run(DispatchOrder(env, dispatch, held.partition))
            else:
                log.info("%s %s held, then not dispatched: %s", env.tx_id, dispatch.action, reason)
            await self.gate.forget(held)

        await asyncio.gather(*(one(*item) for item in items))

    async def _handle_batch(self, batch: Batch) -> None:
        dispatches: list[Dispatch] = []
        for tp, records in batch.items():
            for record in records:
                if passed_over(record.headers, ("OperationDispatched",)):
                    continue  # passed over unparsed by its type header
                try:
                    envelope = Envelope.model_validate_json(record.value)
                    if envelope.type != "OperationDispatched":
                        continue
                    dispatch = envelope.event()
                except ValidationError as error:
                    await self.inputs.dead_letter(tp, record, f"unreadable event: {error}")
                    continue
                assert isinstance(dispatch, OperationDispatched)
                dispatches.append((tp, record, envelope, dispatch))
        if not dispatches:
            return
        try:
            # The gate's intent reads ride along with the projection's: two round trips
            # at once instead of one after the other before a transaction's first call.
            projected, _ = await asyncio.gather(
                self.projection.operations(
                    (env.tenant, env.tx_id, d.action) for _, _, env, d in dispatches
                ),
                self.gate.learn_intents((env.tenant, env.tx_id) for _, _, env, _ in dispatches),
            )
        except ProjectionUnavailable as error:
            # Never act unchecked: a dispatch may be years old. Wait for Postgres.
            raise RetryBatch(f"projection unavailable: {error}") from error
        live: list[Dispatch] = []
        for item in dispatches:
            _, _, env, d = item
            reason = over_because(d, projected.get((env.tenant, env.tx_id, d.action)))
            if reason is None:
                live.append(item)
                continue
            self.skipped += 1
            log.info(
                "%s %s attempt %d (%s) not dispatched: %s (%d skipped so far)",
                env.tx_id,
                d.action,
                d.attempt,
                d.leg.value,
                reason,
                self.skipped,
            )
        await asyncio.gather(*(self._handle(*item) for item in live))

    async def _handle(
        self,
        tp: TopicPartition,
        record: ConsumerRecord,
        envelope: Envelope,
        dispatch: OperationDispatched,
    ) -> None:
        if not self.inputs.owns(tp):
            return  # revoked meanwhile: the new owner reads it again
        order = DispatchOrder(envelope, dispatch, tp.partition, record.headers)
        await self.executor.run(order, span_of=tracing.kafka_record(record, self.inputs.group))

    async def observed(self, order: DispatchOrder, observation: OperationObserved) -> None:
        """The executor's report sink: each observation to recon.observations, on the
        partition of the dispatch's transaction, acknowledged before the batch's offsets
        are committed."""
        env = order.envelope
        await self.producer.send_and_wait(
            self.topics.observations,
            value=observation.model_dump_json().encode(),
            key=partition_key(env.tenant, env.tx_id),
            partition=order.partition,
            headers=tracing.kafka_headers(),
        )


async def run_dispatcher(settings: Settings, stop: asyncio.Event) -> None:
    await ensure_topics(
        settings.kafka_bootstrap, settings.topics, durability=settings.kafka_durability
    )
    projection = Projection(settings.database_url)
    try:
        async with ProviderHttp(settings.provider_timeout_s, connect_s=2.0) as http:
            accounts = build_accounts(http, settings)
            await Dispatcher(settings, accounts, projection).run(stop)
    finally:
        await projection.close()
