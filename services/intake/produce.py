"""Producing one record and waiting for the broker's acknowledgement, for the endpoints
that answer 2xx only once what they accepted is durable in Kafka (promise 7).

The intake's producer has a bounded delivery time. A send that was not acknowledged is
retried by the producer in the background, and with idempotence on it would be retried for
as long as the process lives: the intake could then never tell that an unacknowledged
submission will not land any more, and a tx_id whose produce failed would stay blocked
(issue 7, item 4). Without idempotence a batch gives up `REQUEST_TIMEOUT_S` after it was
created and an in-flight request `REQUEST_TIMEOUT_S` after it was sent, so a record the
intake tried to produce is in the log `DELIVERY_BOUND_S` after the attempt began, or never
will be. What idempotence would add, no duplicate on a retried send, recon already has:
every command and observation produced here carries a deterministic message id, and every
consumer recognises a repeat (the decider by message id, drift by drift id). One request
per partition is in flight at a time, so a retry does not reorder a partition either.
"""

import asyncio
import logging
from typing import Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from events.inputs import Command
from events.keys import partition_key
from events.safe_json import holds_nul
from services import tracing
from services.config import Settings
from services.intake.errors import UNSTORABLE_MESSAGE, ApiError
from services.kafka_clients import acked_producer

log = logging.getLogger(__name__)

# Long enough to ride out a leader election; short enough that the caller's retry, not
# this request, is what waits for a broker that is down.
PRODUCE_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 10.0
# An attempt enqueues within PRODUCE_TIMEOUT_S (else it is cancelled, unsent); its batch
# expires REQUEST_TIMEOUT_S later; a request in flight then times out REQUEST_TIMEOUT_S
# after that. Past this, an unacknowledged record is in the log or never will be.
DELIVERY_BOUND_S = PRODUCE_TIMEOUT_S + 2 * REQUEST_TIMEOUT_S


def intake_producer(settings: Settings, role: str) -> AIOKafkaProducer:
    return acked_producer(
        settings, role, enable_idempotence=False, request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000)
    )


async def produce_acked(
    producer: AIOKafkaProducer, topic: str, key: bytes, value: bytes, what: str
) -> None:
    """Send and wait for the ack; a 503 ApiError if it does not come, so the client retries
    (every record produced here carries a deterministic id, so a retry is recognised)."""
    try:
        # A deadline on this task, not wait_for's task around the send: one task fewer
        # per record produced (issue 24).
        async with asyncio.timeout(PRODUCE_TIMEOUT_S):
            # The request's trace context (services.intake.request_span) goes with it.
            await producer.send_and_wait(
                topic, value=value, key=key, headers=tracing.kafka_headers()
            )
    except (TimeoutError, KafkaError) as exc:
        log.warning("%s not acknowledged by Kafka: %r", what, exc)
        raise ApiError(
            503, "unavailable", f"{what} could not be made durable in Kafka; retry the request"
        ) from None


class Producing(Protocol):
    """What producing a command reads from a door's state: the HTTP app's (starlette's
    State, services.intake.app) or the Kafka door's (services.intake.kafka_intents), which
    therefore need not import the web framework."""

    @property
    def settings(self) -> Settings: ...
    @property
    def producer(self) -> AIOKafkaProducer: ...


def storable(command: Command) -> bytes:
    """The command's record, or the 422 of a request whose text holds a NUL: Postgres stores
    none, so its events would stop the projector at every retry. A submission's is refused by
    its first statement; a command whose text reaches no statement before it is produced (an
    abort's reason, a rejection's note) is refused here."""
    value = command.model_dump_json().encode()
    if holds_nul(value):
        raise ApiError(422, "invalid_request", UNSTORABLE_MESSAGE)
    return value


async def produce_command(state: Producing, command: Command, what: str) -> None:
    """A command onto recon.commands, keyed by its transaction (so the decider that owns
    the transaction reads it in order with the rest), acknowledged or a 503; `storable`'s
    422, with nothing produced."""
    settings = state.settings
    await produce_acked(
        state.producer,
        settings.topics.commands,
        partition_key(command.tenant, command.tx_id),
        storable(command),
        what,
    )
