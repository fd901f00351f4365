"""The dispatcher's Kafka runtime.

At-least-once by design, made safe by keys and lookups: offsets are committed only
after every observation of the batch is acknowledged by Kafka, so a crash re-delivers
the dispatch. A re-delivered dispatch (anything below the partition's end offset when
this process took the partition) and any later attempt look up before they apply.
"""

import asyncio
import logging
from datetime import UTC, datetime

import httpx
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from events.envelope import Envelope
from events.inputs import OperationObserved, Outcome, Source
from events.keys import partition_key
from events.transaction_events import OperationDispatched
from services.config import Settings
from services.crash_points import DISPATCHER_AFTER_PROVIDER_ANSWERED, pause_point
from services.dispatcher.adapters import ProviderAdapter, build_adapters
from services.dispatcher.classify import Seen
from services.kafka_clients import acked_producer, group_consumer
from services.kafka_setup import ensure_topics

log = logging.getLogger(__name__)

# Lookups after an unknown answer: quick at first (lost responses are usually
# visible at once), then backing off. Past this the operation stays `unknown` for
# the scheduled reconciler.
LOOKUP_BACKOFF_S = (0.1, 0.3, 0.6, 1.2, 2.4)
MAX_CONCURRENT_CALLS = 64


class Dispatcher:
    def __init__(self, settings: Settings, adapters: dict[str, ProviderAdapter]) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.adapters = adapters
        self.calls = asyncio.Semaphore(MAX_CONCURRENT_CALLS)
        # Offsets below these were possibly handled by a previous owner.
        self.replay_until: dict[TopicPartition, int] = {}
        self.consumer = group_consumer(settings, "recon-dispatcher")
        self.producer = acked_producer(settings)

    async def run(self, stop: asyncio.Event) -> None:
        await self.producer.start()
        self.consumer.subscribe([self.topics.events], listener=_Listener(self))
        await self.consumer.start()
        try:
            while not stop.is_set():
                batch = await self.consumer.getmany(timeout_ms=500, max_records=200)
                if not batch:
                    continue
                try:
                    await asyncio.gather(
                        *(self._handle(tp, rec) for tp, recs in batch.items() for rec in recs)
                    )
                    await self.consumer.commit(
                        {tp: records[-1].offset + 1 for tp, records in batch.items() if records}
                    )
                except KafkaError as error:
                    # An observation or the commit did not reach Kafka: read the batch
                    # again. Every re-read dispatch looks up first, so nothing is applied
                    # twice.
                    log.warning("batch failed (%r); re-reading it", error)
                    await self._rewind(batch)
        finally:
            await self.consumer.stop()
            await self.producer.stop()

    async def _rewind(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        for tp, records in batch.items():
            if records:
                self.replay_until[tp] = max(self.replay_until.get(tp, 0), records[-1].offset + 1)
                self.consumer.seek(tp, records[0].offset)
        await asyncio.sleep(1.0)

    async def _handle(self, tp: TopicPartition, record: ConsumerRecord) -> None:
        try:
            envelope = Envelope.model_validate_json(record.value)
        except ValidationError:
            log.error(
                "unreadable event at %s:%d@%d, skipped", tp.topic, tp.partition, record.offset
            )
            return
        if envelope.type != "OperationDispatched":
            return
        dispatch = envelope.event()
        assert isinstance(dispatch, OperationDispatched)
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
            message_id=f"{dispatch.op_key}:{dispatch.attempt}:{source.value}:"
            f"{seen.outcome.value}:{self.lookups}",
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
        )
        await self.d.producer.send_and_wait(
            self.d.topics.observations,
            value=observation.model_dump_json().encode(),
            key=partition_key(env.tenant, env.tx_id),
            partition=self.partition,
        )
        log.info(
            "%s %s attempt %d: %s via %s",
            env.tx_id,
            dispatch.action,
            dispatch.attempt,
            seen.outcome.value,
            source.value,
        )


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if assigned:
            ends = await self.dispatcher.consumer.end_offsets(list(assigned))
            self.dispatcher.replay_until.update(ends)


async def run_dispatcher(settings: Settings, stop: asyncio.Event) -> None:
    await ensure_topics(settings.kafka_bootstrap, settings.topics)
    timeout = httpx.Timeout(
        settings.provider_timeout_s, connect=min(2.0, settings.provider_timeout_s)
    )
    async with httpx.AsyncClient(timeout=timeout) as client:
        await Dispatcher(settings, build_adapters(client, settings.providers)).run(stop)
