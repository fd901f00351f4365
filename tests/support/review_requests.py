"""A review requested the way the pull reconciler requests one (a RequestReview command on
recon.commands), for tests that need an open review now rather than after the reconciler's
lookup budget is spent."""

from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer

from events.definition import Leg
from events.inputs import RequestReview
from events.keys import partition_key
from events.topics import Topics
from services.devtools.stack import Stack


async def request_review(
    stack: Stack,
    tx_id: str,
    action: str = "charge",
    *,
    tenant: str = "demo",
    reason: str = "lookup_budget_exhausted",
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        command = RequestReview(
            message_id=f"test-review:{tx_id}:{action}",
            tenant=tenant,
            tx_id=tx_id,
            action=action,
            leg=Leg.FORWARD,
            attempt=1,
            reason=reason,
            issued_at=datetime.now(UTC),
        )
        await producer.send_and_wait(
            Topics(stack.topic_prefix).commands,
            value=command.model_dump_json().encode(),
            key=partition_key(tenant, tx_id),
        )
    finally:
        await producer.stop()
