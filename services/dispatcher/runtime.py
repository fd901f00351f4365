"""The dispatcher's Kafka runtime.

At-least-once by design, made safe by keys and lookups (the shared policy,
services.at_least_once): offsets are committed only after every observation of the batch is
acknowledged by Kafka, so a crash re-delivers the dispatch. A dispatch is a redelivery when
its call was begun before (services.dispatcher.calls_begun, a durable record written right
before every provider call), not when its offset is old: a redelivery and any later attempt
look up before they apply, and a dispatch nobody got as far as calling is sent as a first
send, even on a provider that cannot be asked. A dispatch whose attempt the projection
proves over is not acted on at all. What one call does is decided by the pure plan of
services.dispatcher.call_plan; `Call` executes its requests.
"""

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from events.envelope import Envelope
from events.event_type_header import passed_over
from events.inputs import Evidence, Source
from events.keys import dispatch_observation_id, partition_key
from events.transaction_events import OperationDispatched
from services import tracing
from services.at_least_once import AtLeastOnceConsumer, Batch, RetryBatch
from services.config import Settings
from services.crash_points import (
    DISPATCHER_AFTER_PROVIDER_ANSWERED,
    DISPATCHER_BEFORE_CALL_BEGUN,
    pause_point,
)
from services.dispatcher.call_plan import (
    Apply,
    Balance,
    Begin,
    Gate,
    Hold,
    Lookup,
    Report,
    Request,
    Review,
    Sleep,
    WasBegun,
    call_plan,
    dispatch_observation,
)
from services.dispatcher.gatekeeper import Gatekeeper
from services.dispatcher.in_flight import Projection, ProjectionUnavailable, over_because
from services.governance.store import Held
from services.kafka_clients import acked_producer
from services.kafka_setup import ensure_topics
from services.kafka_start import start_kafka_client
from services.providers.http import ProviderHttp
from services.providers.interface import ProviderAdapter, Sent
from services.providers.registry import Accounts, build_accounts

log = logging.getLogger(__name__)

MAX_CONCURRENT_CALLS = 64

Dispatch = tuple[TopicPartition, ConsumerRecord, Envelope, OperationDispatched]


class Dispatcher:
    def __init__(self, settings: Settings, accounts: Accounts, projection: Projection) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.accounts = accounts
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
        async with self.calls:
            # The call's span continues the trace of the decision that dispatched it; its
            # context goes to the provider (HTTP headers) and back in the observations.
            with tracing.span(
                "dispatcher.call",
                tracing.context_from(record.headers),
                SpanKind.CLIENT,
                semantic=tracing.kafka_record(record, self.inputs.group),
                tx_id=envelope.tx_id,
                op_key=dispatch.op_key,
                attempt=dispatch.attempt,
                action=dispatch.action,
            ):
                await Call(self, envelope, dispatch, tp.partition).run()


class Call:
    """One dispatch: the plan of services.dispatcher.call_plan, executed with the real I/O
    (the gate and `calls_begun` in Postgres, the provider, the observations topic)."""

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

    async def run(self) -> None:
        # The envelope's tenant, the log's: the call goes to that tenant's account.
        adapter = self.d.accounts.adapter_for(self.envelope.tenant, self.dispatch.provider)
        plan = call_plan(self.dispatch, adapter_known=adapter is not None)
        answer: object = None
        while True:
            try:
                request = plan.send(answer)
            except StopIteration:
                return
            answer = await self.execute(request, adapter)

    async def execute(self, request: Request[Any], adapter: ProviderAdapter | None) -> object:
        env, dispatch = self.envelope, self.dispatch
        match request:
            case Gate():
                return await self.d.gate.clear(env, dispatch, self.partition)
            case WasBegun():
                return await self.d.gate.was_begun(env, dispatch)
            case Report():
                await self.report(request)
                return None
            case Sleep(seconds=seconds):
                await asyncio.sleep(seconds)
                return None
            case Begin():
                await pause_point(DISPATCHER_BEFORE_CALL_BEGUN)
                begun = await self.d.gate.begin(env, dispatch)
                if begun.aborted:
                    log.info("%s %s: aborted before its call was begun", env.tx_id, dispatch.action)
                return begun
            case Hold(switches=switches):
                await self.d.gate.hold(env, dispatch, self.partition, switches)
                return None
            case Review():
                await self.review(request)
                return None
        # The rest speak to the provider, which the plan asks for only when it is known.
        assert adapter is not None
        match request:
            case Lookup():
                # The first attempt's dispatch is older than the first send under the key:
                # a replaying adapter judges the key's retention from it (services.
                # providers.interface.Sent). The key is the leg's, every attempt's: a later
                # attempt's dispatch is younger than the first send, so it carries none, and
                # a replaying adapter finds the effect without resending.
                at = datetime.fromisoformat(env.occurred_at)
                sent = Sent(dispatch.payload, at) if dispatch.attempt == 1 else None
                return await adapter.lookup(dispatch.operation, dispatch.op_key, sent)
            case Balance(charge=charge):
                return await adapter.balance(charge)
            case Apply():
                seen = await adapter.apply(dispatch.operation, dispatch.op_key, dispatch.payload)
                await pause_point(DISPATCHER_AFTER_PROVIDER_ANSWERED)
                return seen
        raise AssertionError(f"no executor for {request!r}")

    async def review(self, request: Review) -> None:
        """No call is made: a person decides, with the provider's answer as evidence."""
        seen, dispatch = request.seen, self.dispatch
        log.warning("%s: %s", self.envelope.tx_id, seen.error)
        evidence = Evidence(
            observation_id=dispatch_observation_id(
                dispatch.op_key,
                dispatch.attempt,
                Source.RESPONSE.value,
                seen.outcome.value,
                request.lookups,
            ),
            source=Source.RESPONSE,
            outcome=seen.outcome,
            attempt=dispatch.attempt,
            status_code=seen.status_code,
            body=seen.body,
            error=seen.error,
            observed_at=datetime.now(UTC).isoformat(),
        )
        await self.d.gate.review(self.envelope, dispatch, request.reason, evidence)

    async def report(self, request: Report) -> None:
        env, dispatch, seen = self.envelope, self.dispatch, request.seen
        observation = dispatch_observation(env, dispatch, request, datetime.now(UTC))
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
            request.source.value,
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
