"""Producing one record and waiting for the broker's acknowledgement, for the endpoints
that answer 2xx only once what they accepted is durable in Kafka (promise 7)."""

import asyncio
import logging

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from services.intake.errors import ApiError

log = logging.getLogger(__name__)

# Long enough to ride out a leader election; short enough that the caller's retry, not
# this request, is what waits for a broker that is down.
PRODUCE_TIMEOUT_S = 10.0


async def produce_acked(
    producer: AIOKafkaProducer, topic: str, key: bytes, value: bytes, what: str
) -> None:
    """Send and wait for the ack; a 503 ApiError if it does not come, so the client retries
    (every record produced here carries a deterministic id, so a retry is recognised)."""
    try:
        await asyncio.wait_for(
            producer.send_and_wait(topic, value=value, key=key), PRODUCE_TIMEOUT_S
        )
    except (TimeoutError, KafkaError) as exc:
        log.warning("%s not acknowledged by Kafka: %r", what, exc)
        raise ApiError(
            503, "unavailable", f"{what} could not be made durable in Kafka; retry the request"
        ) from None
