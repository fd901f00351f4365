"""The dispatcher's Kafka runtime.

At-least-once by design, made safe by keys and lookups (the shared policy,
services.at_least_once): offsets are committed only after every observation of the batch is
acknowledged by Kafka, so a crash re-delivers the dispatch. A re-delivered dispatch
(anything below the partition's end offset when this process took the partition, or a
batch read again after a failure) and any later attempt look up before they apply; a
dispatch whose attempt the projection proves over is not acted on at all.
"""

import asyncio
import logging
from datetime import UTC, datetime

import httpx
from aiokafka import ConsumerRecord, TopicPartition
from pydantic import ValidationError

from events.envelope import Envelope
from events.inputs import OperationObserved, Outcome, Source
from events.keys import dispatch_observation_id, partition_key
from events.transaction_events import OperationDispatched
from services.at_least_once import AtLeastOnceConsumer, Batch, RetryBatch
from services.config import Settings
from services.crash_points import DISPATCHER_AFTER_PROVIDER_ANSWERED, pause_point
from services.dispatcher.in_flight import Projection, ProjectionUnavailable, over_because
from services.kafka_clients import acked_producer
from services.kafka_setup import ensure_topics
from services.kafka_start import start_kafka_client
from services.providers.adapters import ProviderAdapter, build_adapters
from services.providers.classify import Seen

log = logging.getLogger(__name__)

# Lookups after an unknown answer: quick at first (lost responses are usually
# visible at once), then backing off. Past this the operation stays `unknown` for
# the scheduled reconciler.
LOOKUP_BACKOFF_S = (0.1, 0.3, 0.6, 1.2, 2.4)
MAX_CONCURRENT_CALLS = 64

Dispatch = tuple[TopicPartition, ConsumerRecord, Envelope, OperationDispatched]


class Dispatcher:
    def __init__(
        self, settings: Settings, adapters: dict[str, ProviderAdapter], projection: Projection
    ) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.adapters = adapters
        self.projection = projection
        self.calls = asyncio.Semaphore(MAX_CONCURRENT_CALLS)
        # Offsets below these were possibly handled by a previous owner.
        self.replay_until: dict[TopicPartition, int] = {}
        # Dispatches not acted on because their attempt was over (a reset group re-reading).
        self.skipped = 0
        self.producer = acked_producer(settings)
        self.inputs = AtLeastOnceConsumer(
            settings,
            "recon-dispatcher",
            [self.topics.events],
            self.producer,
            max_records=200,
            on_assigned=self._assigned,
            on_rewind=self._rewound,
        )

    async def run(self, stop: asyncio.Event) -> None:
        if not await start_kafka_client(self.producer, "dispatcher producer", stop):
            return
        try:
            await self.inputs.run(stop, self._handle_batch)
        finally:
            await self.producer.stop()

    async def _assigned(self, assigned: set[TopicPartition]) -> None:
        ends = await self.inputs.consumer.end_offsets(list(assigned))
        self.replay_until.update(ends)

    def _rewound(self, batch: Batch) -> None:
        for tp, records in batch.items():
            self.replay_until[tp] = max(self.replay_until.get(tp, 0), records[-1].offset + 1)

    async def _handle_batch(self, batch: Batch) -> None:
        dispatches: list[Dispatch] = []
        for tp, records in batch.items():
            for record in records:
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
            projected = await self.projection.operations(
                (env.tenant, env.tx_id, d.action) for _, _, env, d in dispatches
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
        redelivered = record.offset < self.replay_until.get(tp, 0)
        async with self.calls:
            await Call(self, envelope, dispatch, tp.partition).run(
                lookup_first=dispatch.lookup_first or redelivered
            )


class Call:
    """One dispatch: optionally look up, apply, then resolve an unknown by lookups."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        envelope: Envelope,
        dispatch: OperationDispatched,
        partition: int,
    ) -> None:
        self.d = dispatcher
        self.envelope = envelope
        self.dispatch = dispatch
        self.partition = partition
        self.lookups = 0

    async def run(self, *, lookup_first: bool) -> None:
        adapter = self.d.adapters.get(self.dispatch.provider)
        if adapter is None:
            # Intake refuses unknown providers; reaching here means configuration
            # changed under a live transaction. Unknown, never failed: a person decides.
            await self.report(
                Source.RESPONSE,
                Seen(Outcome.UNKNOWN, error=f"no adapter for provider {self.dispatch.provider!r}"),
            )
            return
        op, key = self.dispatch.operation, self.dispatch.op_key
        if lookup_first:
            seen = await self.lookup(adapter)
            if seen.outcome is not Outcome.ABSENT:
                await self.report(Source.LOOKUP, seen)
                if seen.outcome is not Outcome.SUCCEEDED:
                    await self.resolve(adapter)
                return
        seen = await adapter.apply(op, key, self.dispatch.payload)
        await pause_point(DISPATCHER_AFTER_PROVIDER_ANSWERED)
        await self.report(Source.RESPONSE, seen)
        if seen.outcome is Outcome.UNKNOWN:
            await self.resolve(adapter)

    async def lookup(self, adapter: ProviderAdapter) -> Seen:
        self.lookups += 1
        return await adapter.lookup(self.dispatch.operation, self.dispatch.op_key)

    async def resolve(self, adapter: ProviderAdapter) -> None:
        seen: Seen | None = None
        for delay in LOOKUP_BACKOFF_S:
            await asyncio.sleep(delay)
            seen = await self.lookup(adapter)
            if seen.outcome in (Outcome.SUCCEEDED, Outcome.ABSENT):
                break
        if seen is not None:
            await self.report(Source.LOOKUP, seen)

    async def report(self, source: Source, seen: Seen) -> None:
        env, dispatch = self.envelope, self.dispatch
        observation = OperationObserved(
            # Same call, same sighting, same id: a redone call's duplicate is recognised.
            message_id=dispatch_observation_id(
                dispatch.op_key, dispatch.attempt, source.value, seen.outcome.value, self.lookups
            ),
            tenant=env.tenant,
            tx_id=env.tx_id,
            action=dispatch.action,
            op_key=dispatch.op_key,
            attempt=dispatch.attempt,
            source=source,
            outcome=seen.outcome,
            status_code=seen.status_code,
            remote_id=seen.remote_id,
            body=seen.body,
            error=seen.error,
            observed_at=datetime.now(UTC),
            by_dispatcher=True,
        )
        await self.d.producer.send_and_wait(
            self.d.topics.observations,
            value=observation.model_dump_json().encode(),
            key=partition_key(env.tenant, env.tx_id),
            partition=self.partition,
        )
        if seen.alarm is not None:
            # Unknown, so the transaction waits; a person must fix the configuration.
            log.error(
                "%s %s attempt %d: %s", env.tx_id, dispatch.action, dispatch.attempt, seen.alarm
            )
        log.info(
            "%s %s attempt %d: %s via %s",
            env.tx_id,
            dispatch.action,
            dispatch.attempt,
            seen.outcome.value,
            source.value,
        )


async def run_dispatcher(settings: Settings, stop: asyncio.Event) -> None:
    await ensure_topics(
        settings.kafka_bootstrap, settings.topics, durability=settings.kafka_durability
    )
    timeout = httpx.Timeout(
        settings.provider_timeout_s, connect=min(2.0, settings.provider_timeout_s)
    )
    projection = Projection(settings.database_url)
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            adapters = build_adapters(client, settings.providers)
            await Dispatcher(settings, adapters, projection).run(stop)
    finally:
        await projection.close()
