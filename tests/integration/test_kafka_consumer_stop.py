"""A consumer's stop neither raises the cancellation of aiokafka's own tasks nor leaves its
connections open (services/kafka_consumer_stop.py, installed in this test process as in
every recon process: services/kafka_mends.py).

A real broker. The fetch that fails is a real client's request answered with the error
aiokafka raises when the broker does not answer within `request_timeout_ms`: a clean-clone
CI run met it on a loaded machine (the intake's progress reader, stopped inside its fetch's
retry back-off, raised CancelledError out of GroupWatch.close); here the back-off is made
long so that the stop lands inside it every time."""

import asyncio
import time
from typing import Any

import aiokafka.errors as Errors
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.protocol.fetch import FetchRequest
from support.topic_setup import create_topic

from services.kafka_consumer_stop import ended


def _closed(consumer: AIOKafkaConsumer) -> bool:
    """The client's connections closed and its metadata task ended."""
    client = consumer._client
    connected = [conn for conn in client._conns.values() if conn.connected()]
    return not connected and client._sync_task is None


async def _assigned(bootstrap: str, topic: str, **options: Any) -> AIOKafkaConsumer:
    await create_topic(bootstrap, topic, 1)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **options)
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    return consumer


async def test_a_consumer_stopped_in_a_failed_fetchs_back_off_stops_and_closes(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    consumer = await _assigned(
        kafka_bootstrap, f"{topic_prefix}fetch-back-off", retry_backoff_ms=60_000
    )
    send = consumer._client.send
    failed = asyncio.Event()

    async def timing_out(node_id: int, request: Any, **kw: Any) -> Any:
        if isinstance(request, FetchRequest):
            failed.set()
            raise Errors.RequestTimedOutError()
        return await send(node_id, request, **kw)

    consumer._client.send = timing_out
    await asyncio.wait_for(failed.wait(), 30)
    await asyncio.sleep(0.1)  # the failed fetch is in its back-off now
    started = time.monotonic()
    await consumer.stop()  # raised CancelledError without the mend
    assert _closed(consumer), "the consumer's connections were left open"
    assert time.monotonic() - started < 10, "the stop waited out the back-off"


async def test_a_consumer_without_a_group_stopped_right_after_its_start_closes(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    consumer = await _assigned(kafka_bootstrap, f"{topic_prefix}stopped-at-once")
    await consumer.stop()  # no turn of the loop between: its reset task never ran
    assert _closed(consumer), "the consumer's connections were left open"


async def test_a_task_cancelled_by_its_owner_ends_quietly_and_the_callers_cancel_is_raised() -> (
    None
):
    never = asyncio.get_running_loop().create_future()
    owned = asyncio.ensure_future(never)
    owned.cancel()
    await ended(owned)  # the owned task's cancellation is its end

    async def stopping() -> None:
        await ended(asyncio.ensure_future(asyncio.sleep(60)))

    caller = asyncio.ensure_future(stopping())
    await asyncio.sleep(0.01)
    caller.cancel()
    done, _ = await asyncio.wait([caller], timeout=5)
    assert done and caller.cancelled(), "the caller's own cancellation was swallowed"
