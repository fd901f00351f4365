"""A decider's answers for partitions it no longer owns are forwarded in the background
(services.decider.dispatch_host.DispatchHost.forward_later): an error that may pass is
retried, a record Kafka refuses for its size is not, and it holds back none of the others."""

import asyncio
from datetime import UTC, datetime
from typing import Any

from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError

from events.inputs import OperationObserved, Outcome, Source
from events.observation import Seen, observation
from services.config import load_settings
from services.decider.dispatch_host import Answer, DispatchHost


class _Producer:
    """Refuses tx-big's record for its size; fails the first attempt at anything else as a
    broker away would."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.attempts: dict[str, int] = {}

    async def send_and_wait(self, topic: str, value: bytes, **_: Any) -> None:
        tx_id = OperationObserved.model_validate_json(value).tx_id
        self.attempts[tx_id] = self.attempts.get(tx_id, 0) + 1
        if tx_id == "tx-big":
            raise MessageSizeTooLargeError()
        if self.attempts[tx_id] == 1:
            raise KafkaConnectionError()
        self.sent.append(tx_id)


def _answer(tx_id: str) -> Answer:
    seen = observation(
        message_id=f"m-{tx_id}",
        tenant="demo",
        tx_id=tx_id,
        action="charge",
        op_key=f"k-{tx_id}",
        attempt=1,
        source=Source.RESPONSE,
        seen=Seen(Outcome.SUCCEEDED),
        observed_at=datetime(2026, 12, 4, tzinfo=UTC),
    )
    return Answer(partition=1, observation=seen, trace=None)


async def test_a_refused_answer_is_sent_once_and_the_next_still_goes_after_a_passing_error() -> (
    None
):
    host = DispatchHost(load_settings(), lambda: (), lambda a: None, lambda *k: None)
    await host.producer.stop()  # the real one, made and never started: the test's replaces it
    producer = _Producer()
    host.producer = producer

    host.forward_later([_answer("tx-big"), _answer("tx-after")])
    # The passing error costs one back-off of 1 s before tx-after's second attempt.
    async with asyncio.timeout(10):
        while host.tasks:
            await asyncio.sleep(0.05)

    assert producer.sent == ["tx-after"]
    assert producer.attempts == {"tx-big": 1, "tx-after": 2}
