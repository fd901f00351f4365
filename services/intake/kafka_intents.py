"""`python -m services.intake.kafka_intents`: the intake's Kafka door, for agents that
already run on Kafka (README, "Agents that speak Kafka").

An agent of tenant T produces its submission body, exactly the JSON of
`POST /v1/transactions`, to `recon.intents.T` keyed `T/<tx_id>`. The tenant is the topic's:
on a real cluster only T's principal may write to that topic (a literal ACL), so the
broker's authentication of the producer, never the record, says whose intent it is. Each
record is accepted by the same function as the HTTP route (services.intake.accept): same
checks, same `intents` guard, same SubmitTransaction and op keys. Every record is answered
on `recon.intent-replies.T`, keyed by tx_id: the HTTP 202 body for an accepted intent, and
for a refusal the HTTP API's status and error code, with nothing recorded. A failure nobody
foresaw (a bug, a body no check expected) is answered too, as a 500 `internal_error` naming
its reason, and the record is dead-lettered (recon.dead-letters) and passed: one record must
never stop the door for every tenant by crashing the process on each re-read.

Delivery: the shared at-least-once policy (services.at_least_once): offsets are committed
once the command and the reply are acknowledged; a crash re-reads the record and accepts it
again, which is harmless (the same body is the same intent) but may repeat its reply. A
database or a Kafka that does not answer reads the batch again after a back-off instead of
answering `unavailable`: the intent waits in its topic, which is what a Kafka agent expects.
FastStream is not used for the reasons the dispatcher does not use it (README, "At-least-once
consumers"): one consumer policy and one process lifecycle for every recon consumer.
"""

import asyncio
import json
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from services import consumer_groups
from services.at_least_once import AtLeastOnceConsumer, Batch, RetryBatch
from services.closing import stopped_with
from services.config import Settings
from services.intake.accept import accept_submission
from services.intake.errors import DATABASE_DOWN, UNSTORABLE, UNSTORABLE_MESSAGE, ApiError
from services.intake.intent_claims import IntentClaims
from services.intake.policy_cache import PolicyCache
from services.intake.produce import intake_producer
from services.intake.produced_marks import ProducedMarks
from services.intake.response_models import IntentRefused
from services.intake.submission import SubmissionRefused
from services.intake.submission_gate import GateRefused
from services.kafka_setup import ensure_recon_topics
from services.kafka_start import start_kafka_client
from services.lifecycle import run_process
from services.metrics import KAFKA_INTENTS
from services.postgres_start import open_pool
from services.stop_race import StoppedStarting

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DoorState:
    """The Kafka door's state for accepting a submission (services.intake.accept.Accepting):
    what the HTTP app's state holds for it, without starlette's State, so a reader of Kafka
    does not import the web framework."""

    settings: Settings
    pool: asyncpg.Pool
    producer: AIOKafkaProducer
    policies: PolicyCache
    intent_claims: IntentClaims
    produced_marks: ProducedMarks


class IntentSubscriber:
    def __init__(self, settings: Settings, pool: asyncpg.Pool, tenants: list[str]) -> None:
        self.topics = settings.topics
        self.producer = intake_producer(settings, "intents-producer")
        # What accept_submission needs, as the HTTP app's state holds it.
        self.state = DoorState(
            settings,
            pool,
            self.producer,
            PolicyCache(),
            IntentClaims(pool),
            ProducedMarks(pool),
        )
        self.inputs = AtLeastOnceConsumer(
            settings,
            consumer_groups.INTENTS,
            consumer_groups.intents_inputs(self.topics, tenants),
            self.producer,
            role="intents-inputs",
            max_records=100,
        )

    async def run(self, stop: asyncio.Event) -> None:
        # As the saga's (services.saga.runtime): both clients stopped however it ends.
        async with AsyncExitStack() as stack:
            stopped_with(stack, self.producer)
            stopped_with(stack, self.inputs.consumer)
            if await start_kafka_client(self.producer, "intents producer", stop):
                await self.inputs.run(stop, self._answer_batch)

    async def _answer_batch(self, batch: Batch) -> None:
        # In order, one record at a time: each waits for its command's ack anyway, and a
        # retried batch must not race a half-done one.
        for records in batch.values():
            for record in records:
                await self._answer(record)

    async def _answer(self, record: ConsumerRecord) -> None:
        tenant = self.topics.tenant_of_intents(record.topic)
        assert tenant is not None, record.topic  # only intents topics are subscribed
        key_tenant, _, key_tx_id = (record.key or b"").decode(errors="replace").partition("/")
        try:
            size = len(record.value or b"")
            if size > self.state.settings.max_body_bytes:
                # The same bound as the HTTP door (RECON_MAX_BODY_BYTES), not the broker's.
                raise ApiError(
                    413,
                    "body_too_large",
                    f"the intent is {size} bytes; at most "
                    f"{self.state.settings.max_body_bytes} are accepted",
                )
            if key_tenant != tenant or not key_tx_id:
                raise ApiError(
                    422,
                    "invalid_request",
                    f"key the record {tenant}/<tx_id>: this topic takes the intents of "
                    f"tenant {tenant!r} only",
                )
            answer = await accept_submission(
                self.state, tenant, record.value or b"", keyed_tx_id=key_tx_id
            )
        except ApiError as refusal:
            if refusal.status == 503:
                raise RetryBatch(refusal.message) from None
            answer = _refused(
                key_tx_id,
                refusal.status,
                refusal.code,
                refusal.message,
                refusal.details.get("duplicate_of"),
            )
        except SubmissionRefused as refusal:
            answer = _refused(key_tx_id, 422, refusal.code, refusal.message)
        except GateRefused as refusal:
            answer = _refused(
                key_tx_id, refusal.status, refusal.refusal.error, refusal.refusal.message
            )
        except DATABASE_DOWN as error:
            raise RetryBatch(repr(error)) from None
        except UNSTORABLE:
            answer = _refused(key_tx_id, 422, "invalid_request", UNSTORABLE_MESSAGE)
        except (KafkaError, RetryBatch):
            raise  # the at-least-once policy reads the batch again
        except Exception as error:
            # Unforeseen: answered and set aside, never a crash loop (module docstring).
            log.exception("intent %s failed unexpectedly", key_tx_id or "(unkeyed)")
            reason = f"unexpected {type(error).__name__}: {error}"
            tp = TopicPartition(record.topic, record.partition)
            await self.inputs.dead_letter(tp, record, reason)
            answer = _refused(
                key_tx_id,
                500,
                "internal_error",
                f"recon could not judge this intent ({reason}); the record was set aside "
                "on the dead-letter topic for an operator",
            )
        KAFKA_INTENTS.labels(str(answer.get("error", "accepted"))).inc()
        origin = f"{record.topic}:{record.partition}:{record.offset}"
        log.info("%s %s: %s", origin, answer["tx_id"], answer.get("error", "accepted"))
        await self.producer.send_and_wait(
            self.topics.intent_replies(tenant),
            key=str(answer["tx_id"]).encode(),
            value=json.dumps(answer).encode(),
            # Which record this answers, for a refusal whose key named no tx_id.
            headers=[("origin", origin.encode())],
        )


def _refused(
    tx_id: str,
    status: int,
    code: str,
    message: str,
    duplicate_of: dict[str, Any] | None = None,
) -> dict[str, Any]:
    refused = IntentRefused(
        tx_id=tx_id, http_status=status, error=code, message=message, duplicate_of=duplicate_of
    )
    return refused.model_dump(exclude_none=True)


async def run_intents(settings: Settings, stop: asyncio.Event) -> None:
    tenants = consumer_groups.intent_tenants(settings)
    extra: dict[str, dict[str, str]] = {settings.topics.intents(t): {} for t in tenants}
    extra |= {settings.topics.intent_replies(t): {} for t in tenants}
    if not await ensure_recon_topics(settings, extra, stop):
        return
    try:
        pool = await open_pool(settings.database_url, stop=stop, min_size=1, max_size=4)
    except StoppedStarting:
        return
    try:
        log.info("reading the Kafka intents of %s", ", ".join(tenants) or "no tenant")
        await IntentSubscriber(settings, pool, tenants).run(stop)
    finally:
        await pool.close()


if __name__ == "__main__":
    run_process("intents", run_intents, database=True)
