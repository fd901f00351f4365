"""How a recon process lets go of the Kafka clients and pools it opened, whichever of its
steps fails: one rule for every process's start and stop, on contextlib.AsyncExitStack.

A client left open keeps its connections and its background tasks (aiokafka's metadata
refresh, a producer's sender, a group member's heartbeat) until the process exits, and
aiokafka logs it at ERROR (`Unclosed AIOKafkaProducer`) when it is collected: a process
whose start fails part-way and that is started again in the same interpreter (a test, a
lifespan run again) leaked one set each time. The try/finally ladders this replaces each
missed a rung: a start outside its `try`, a client made before a step that failed and
never stopped, a second reader not closed because closing the first raised.
"""

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from services.kafka_clients import stop_client

Client = TypeVar("Client", AIOKafkaConsumer, AIOKafkaProducer, AIOKafkaAdminClient)


def stopped_with(stack: AsyncExitStack, client: Client) -> Client:
    """`client`, stopped when `stack` closes, whether it started or not.

    Registered as it is made, before its start: aiokafka's `start()` keeps what it opened
    when a later step of it fails or is cancelled (services.kafka_clients.start_or_stop),
    so a start that raised still leaves a client to stop; and a client made but never
    started (a step before its start failed) is stopped too, which closes nothing and ends
    aiokafka's report of it. Stopping twice does nothing, so an owner that also stops it on
    its way out (services.at_least_once) is no matter."""
    # Each on its kind's bounded stop: a broker that answers nothing holds a consumer's own
    # stop 40 s a request, and a producer's while a record of it is on its way.
    stack.push_async_callback(stop_client, client)
    return client


async def stop_each(*stops: Callable[[], Awaitable[object]]) -> None:
    """Runs every stop, in the order given, each whatever the earlier ones raised; then
    raises what they raised (the last error, the earlier ones as its context)."""
    async with AsyncExitStack() as stack:
        for stop in reversed(stops):
            stack.push_async_callback(stop)
