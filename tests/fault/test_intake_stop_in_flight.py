"""The intake's stop with a request in flight that never ends: its body never comes (a
client stalled mid-upload, or a slow sender on purpose). uvicorn lets the requests in
flight end before it stops, by default without a bound, so one such connection held the
intake's stop until the orchestrator's grace ran out and killed it. Past REQUESTS_STOP_S
the requests left are cancelled (services.intake.__main__), and the stop goes on."""

import asyncio
import dataclasses
from collections.abc import Callable

import pytest
from conftest import Infra
from support.intake_app import intake_settings
from support.stop_timing import ended_within

from services.intake import __main__ as intake_process

pytestmark = pytest.mark.timeout(180)

# The bound, shortened for the test (30 s and more in the process).
BOUND_S = 1
# The lifespan's end: its clients' stops and the pools' closes, on a loaded machine.
SLACK_S = 4.0


async def _connected(
    port: int, serving: "asyncio.Task[None]"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection once the intake serves (its start-up sets up topics and clients)."""
    async with asyncio.timeout(60):
        while True:
            assert not serving.done(), serving
            try:
                return await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.2)


async def test_a_request_whose_body_never_comes_does_not_hold_the_intakes_stop(
    infra: Infra,
    fresh_database: str,
    topic_prefix: str,
    free_port: Callable[[], int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(intake_process, "REQUESTS_STOP_S", BOUND_S)
    settings = await intake_settings(infra, fresh_database, topic_prefix)
    settings = dataclasses.replace(settings, intake_port=free_port())
    stop = asyncio.Event()
    serving = asyncio.create_task(intake_process.serve_intake(settings, stop))
    writer: asyncio.StreamWriter | None = None
    try:
        _, writer = await _connected(settings.intake_port, serving)
        # The head whole, a tenth of the body: the request is the app's, awaiting the rest.
        writer.write(
            b"POST /v1/transactions HTTP/1.1\r\nHost: intake\r\n"
            b"Authorization: Bearer key-acme\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"tx_id": "stalled", '
        )
        await writer.drain()
        await asyncio.sleep(1.0)
        assert not serving.done(), serving
        stop.set()
        await ended_within(serving, BOUND_S + SLACK_S, "the intake's stop")
        serving.result()
    finally:
        stop.set()
        if writer is not None:
            writer.close()  # without the bound, the request ends with its connection
        await asyncio.wait_for(serving, 60)
