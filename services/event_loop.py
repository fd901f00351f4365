"""Which asyncio event loop a recon process runs on: uvloop (libuv) unless
RECON_EVENT_LOOP=asyncio asks for the standard library's.

Every recon process is I/O-bound Python spending a large share of its CPU in the loop
itself (selectors, transports, callbacks, per Kafka fetch, HTTP request and Postgres round
trip); uvloop does that part in C. The loop changes nothing in what the code means: the
same asyncio API, the same ordering of awaited results. One difference aiokafka does not
expect, a write on a connection the broker has just reset, is mended before uvloop runs
(services.kafka_uvloop). aiokafka's mends that need no uvloop are in place before either
loop runs, as in every process that imports aiokafka (services.kafka_mends).
"""

import asyncio
from collections.abc import Coroutine
from typing import Any

LOOPS = ("uvloop", "asyncio")


def run(main: Coroutine[Any, Any, None], loop: str) -> None:
    if loop == "uvloop":
        import uvloop

        from services import kafka_uvloop

        kafka_uvloop.install()
        uvloop.run(main)
    else:
        asyncio.run(main)
