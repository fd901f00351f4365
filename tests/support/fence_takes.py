"""Takes of a decider partition as Decider.take makes them, for the call fence's tests
(services.dispatcher.call_fence): a transactional producer of `recon-decider-<p>` initialised
on a real broker, each fencing the one before, and the fence each take was given."""

import asyncio

import asyncpg

from services.config import Settings
from services.decider.runtime import producer_fence
from services.dispatcher.call_fence import Fence
from services.kafka_clients import acked_producer


async def taken_in_turn(settings: Settings, partition: int, takes: int) -> list[Fence]:
    """The fences of `takes` decider processes taking `partition` one after another on the
    cluster `settings` reach: each initialises its transactional producer (as Decider.take
    does), which fences the one before it in Kafka."""
    fences = []
    for _ in range(takes):
        producer = acked_producer(
            settings,
            "decider-transactions",
            transactional_id=f"{settings.topics.prefix}recon-decider-{partition}",
        )
        await producer.start()
        try:
            fences.append(await producer_fence(producer))
        finally:
            await producer.stop()
    return fences


async def fence_recorded(conn: asyncpg.Connection, fence: Fence) -> None:
    """Waits until the one partition's recorded fence is `fence` (DispatchHost.fenced's
    task writes it)."""
    token = (fence.producer_id, fence.epoch)
    async with asyncio.timeout(10):
        while await conn.fetchrow("SELECT producer_id, epoch FROM call_fences") != token:
            await asyncio.sleep(0.01)
