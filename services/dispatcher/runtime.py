"""The dispatcher's Kafka runtime.

At-least-once by design, made safe by keys and lookups (the shared policy,
services.at_least_once): offsets are committed only after every observation of the batch is
acknowledged by Kafka, so a crash re-delivers the dispatch. A dispatch is a redelivery when
its call was begun before (services.dispatcher.calls_begun, a durable record written right
before every provider call), not when its offset is old: a redelivery and any later attempt
look up before they apply, and a dispatch nobody got as far as calling is sent as a first
send, even on a provider that cannot be asked. A dispatch whose attempt the projection
proves over is not acted on at all.
"""

import asyncio
import logging
from datetime import UTC, datetime

from aiokafka import ConsumerRecord, TopicPartition
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from events.aborted_before_call import ABORTED_BEFORE_CALL
from events.catalog import operation_info
from events.envelope import Envelope
from events.inputs import Evidence, OperationObserved, Outcome, Source
from events.keys import dispatch_observation_id, partition_key
from events.retry_policy import redelivery_may_apply
from events.transaction_events import OperationDispatched
from services import tracing
from services.at_least_once import AtLeastOnceConsumer, Batch, RetryBatch
from services.config import Settings
from services.crash_points import (
    DISPATCHER_AFTER_PROVIDER_ANSWERED,
    DISPATCHER_BEFORE_CALL_BEGUN,
    pause_point,
)
from services.dispatcher.gatekeeper import Gatekeeper
from services.dispatcher.in_flight import Projection, ProjectionUnavailable, over_because
from services.governance.store import Held
from services.kafka_clients import acked_producer
from services.kafka_setup import ensure_topics
from services.kafka_start import start_kafka_client
from services.providers.adapters import ProviderAdapter, build_adapters
from services.providers.classify import Seen
from services.providers.http import ProviderHttp
from services.providers.preconditions import (
    PRECONDITION_FAILED,
    balance_needed,
    judge_balance,
)

log = logging.getLogger(__name__)

# Lookups after an unknown answer: quick at first (lost responses are usually
# visible at once), then backing off. Past this the operation stays `unknown` for
# the scheduled reconciler.
LOOKUP_BACKOFF_S = (0.1, 0.3, 0.6, 1.2, 2.4)
MAX_CONCURRENT_CALLS = 64
NOT_RESENT = (
    "destructive operation redelivered and absent at the provider: a previous dispatcher "
    "may have sent it, so it is not sent again; lookups or a person settle it"
)

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
        # Dispatches not acted on because their attempt was over (a reset group re-reading).
        self.skipped = 0
        self.producer = acked_producer(settings)
        # Kill switches, grants and quotas, checked right before each provider call.
        self.gate = Gatekeeper(settings, self.producer)
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
        redelivery exactly when its call was begun: Call.run asks the durable record."""
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
                async with self.calls:
                    await Call(self, env, dispatch, held.partition).run()
            else:
                log.info("%s %s held, then not dispatched: %s", env.tx_id, dispatch.action, reason)
            await self.gate.forget(held)

        await asyncio.gather(*(one(*item) for item in items))

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
        async with self.calls:
            # The call's span continues the trace of the decision that dispatched it; its
            # context goes to the provider (HTTP headers) and back in the observations.
            with tracing.span(
                "dispatcher.call",
                tracing.context_from(record.headers),
                SpanKind.CLIENT,
                tx_id=envelope.tx_id,
                op_key=dispatch.op_key,
                attempt=dispatch.attempt,
                action=dispatch.action,
            ):
                await Call(self, envelope, dispatch, tp.partition).run()


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

    async def run(self) -> None:
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
        info = operation_info(self.dispatch.provider, op)
        # The policy gate (services.dispatcher.gatekeeper): held or sent to review, or on.
        if not await self.d.gate.clear(self.envelope, self.dispatch, self.partition):
            return
        # Judged by what happened, not by an offset: a row means a call may have been made.
        redelivered = await self.d.gate.was_begun(self.envelope, self.dispatch)
        if self.dispatch.lookup_first or redelivered:
            seen = await self.lookup(adapter)
            if seen.outcome is not Outcome.ABSENT:
                await self.report(Source.LOOKUP, seen)
                if seen.outcome is not Outcome.SUCCEEDED:
                    await self.resolve(adapter)
                return
            if redelivered and not redelivery_may_apply(info):
                await self.not_resent()
                return
        if self.dispatch.attempt > 1:
            # A new attempt: what held when the first was approved must hold now.
            stopped = await self.preconditions(adapter)
            if stopped is not None:
                await self.stop(stopped)
                return
        # The last gate, after the lookup and the precondition's provider call: the kill
        # switches and the transaction's abort, checked by the statement that records the
        # call about to be made.
        await pause_point(DISPATCHER_BEFORE_CALL_BEGUN)
        begun = await self.d.gate.begin(self.envelope, self.dispatch, self.partition)
        if begun is None:
            return
        if begun.aborted:
            # Never begun, never to be: a definitive "not applied" the decider reads as the
            # abort (events.aborted_before_call).
            log.info("%s %s: aborted before its call was begun", self.envelope.tx_id, op)
            await self.report(Source.RESPONSE, Seen(Outcome.REJECTED, error=ABORTED_BEFORE_CALL))
            return
        if not begun.written and not redelivered and not redelivery_may_apply(info):
            # Another dispatcher began this very call meanwhile (a zombie, a lost lease).
            await self.not_resent()
            return
        seen = await adapter.apply(op, key, self.dispatch.payload)
        await pause_point(DISPATCHER_AFTER_PROVIDER_ANSWERED)
        await self.report(Source.RESPONSE, seen)
        if seen.outcome is Outcome.UNKNOWN:
            await self.resolve(adapter)

    async def not_resent(self) -> None:
        """A previous call of this attempt was begun and may still land: for a destructive
        operation "absent" is not proof enough to call again."""
        await self.report(Source.LOOKUP, Seen(Outcome.UNKNOWN, error=NOT_RESENT))

    async def preconditions(self, adapter: ProviderAdapter) -> Seen | None:
        charge = balance_needed(self.dispatch.operation, self.dispatch.payload)
        if charge is None:
            return None
        status, body = await adapter.balance(charge)
        stopped = judge_balance(self.dispatch.payload, status, body)
        if stopped is not None:
            log.warning("%s: %s", self.envelope.tx_id, stopped.error)
        return stopped

    async def stop(self, seen: Seen) -> None:
        """No call is made. A precondition that could not be read is `unknown` (asked again
        later); one that no longer holds goes to a person with the provider's answer: the
        operation stays open, so once the world is right again (and, for a step that needed
        approval, a fresh approval exists) a review `retry` makes the attempt."""
        if seen.outcome is Outcome.UNKNOWN:
            await self.report(Source.RESPONSE, seen)
            return
        evidence = Evidence(
            observation_id=dispatch_observation_id(
                self.dispatch.op_key,
                self.dispatch.attempt,
                Source.RESPONSE.value,
                seen.outcome.value,
                self.lookups,
            ),
            source=Source.RESPONSE,
            outcome=seen.outcome,
            attempt=self.dispatch.attempt,
            status_code=seen.status_code,
            body=seen.body,
            error=seen.error,
            observed_at=datetime.now(UTC).isoformat(),
        )
        await self.d.gate.review(self.envelope, self.dispatch, PRECONDITION_FAILED, evidence)

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
            headers=tracing.kafka_headers(),
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
    projection = Projection(settings.database_url)
    try:
        async with ProviderHttp(settings.provider_timeout_s, connect_s=2.0) as http:
            adapters = build_adapters(http, settings.providers)
            await Dispatcher(settings, adapters, projection).run(stop)
    finally:
        await projection.close()
