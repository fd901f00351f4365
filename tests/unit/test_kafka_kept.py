"""A kept consumer (services.kafka_kept: the intake's group watch readers) closed while its
first use is still starting it is stopped once that start ends, and none is made after the
close. A real aiokafka consumer whose start is held (no broker is reached: the start is
replaced), so the close can be asked at that moment."""

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer
from support.kafka_leaks import unstopped

from services.kafka_kept import KeptConsumer, KeptConsumerClosed

CLIENT_ID = "kept-under-test"


class HeldStart(AIOKafkaConsumer):  # type: ignore[misc]
    """A consumer whose start waits for `release`, then succeeds without a broker."""

    def __init__(self, started: asyncio.Event, release: asyncio.Event) -> None:
        super().__init__(bootstrap_servers="127.0.0.1:1", client_id=CLIENT_ID)
        self.started, self.release = started, release

    async def start(self) -> None:
        self.started.set()
        await self.release.wait()


async def test_a_close_during_the_first_start_stops_the_consumer_that_start_made() -> None:
    started, release = asyncio.Event(), asyncio.Event()
    made: list[HeldStart] = []

    def make() -> HeldStart:
        made.append(HeldStart(started, release))
        return made[-1]

    kept = KeptConsumer(make, "reader under test")
    getting = asyncio.ensure_future(kept.get())
    await started.wait()
    closing = asyncio.ensure_future(kept.close())
    await asyncio.sleep(0.05)
    assert not closing.done(), "the close did not wait for the start in progress"
    release.set()
    await getting  # its caller raced the close: it may get the consumer, stopped next
    await closing
    assert len(made) == 1
    assert unstopped(CLIENT_ID) == []
    with pytest.raises(KeptConsumerClosed):
        await kept.get()
    assert len(made) == 1, "a client was made after the close"
    await kept.close()  # a second close does nothing
