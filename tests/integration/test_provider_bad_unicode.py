"""A provider answer that json.loads accepts but UTF-8 cannot encode (a lone surrogate) is
recorded escaped: the dispatcher neither crashes nor crash-loops on redelivery."""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from support.local_server import serving
from support.recon_client import Recon, op, transaction

from services.devtools.stack import Stack

# Valid JSON, escapes included: decoded, "\ud800" is a str no encoder accepts.
ANSWER = b'{"id": "res_\\ud800", "status": "succeeded", "note": "x\\udfff"}'

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def odd_provider(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """Answers every call with ANSWER; lookups and listings find nothing."""
    assert scope["type"] == "http"
    body = ANSWER if scope["method"] == "POST" else b'{"effects": []}'
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def odd_url() -> AsyncIterator[str]:
    async with serving(odd_provider, lifespan="off", log_level="error") as url:
        yield url


async def test_a_lone_surrogate_from_a_provider_is_recorded_escaped(
    stack: Stack, recon: Recon, odd_url: str
) -> None:
    # The intake accepts only configured providers; the decider and reconciler call them.
    for name in ("intake", "reconciler", "decider"):
        stack.stop(name)
    stack.extra_env["RECON_PROVIDERS"] = f"sandbox={stack.sandbox_url},odd={odd_url}"
    for name in ("decider", "reconciler", "intake"):
        stack.start(name)
    await stack.wait_ready()

    body = transaction("odd-1")
    body["steps"][0]["provider"] = "odd"
    assert (await recon.submit(body)).status_code == 202
    deadline = time.monotonic() + 60
    while (await recon.get("odd-1")).json().get("status") != "committed":
        assert stack.processes["decider"].poll() is None, stack.log_tail("decider")
        assert time.monotonic() < deadline, (await recon.get("odd-1")).text
        await asyncio.sleep(0.2)
    tx = await recon.wait_terminal("odd-1")
    assert tx["status"] == "committed", tx
    assert op(tx, "reserve")["remote_id"] == "res_\\ud800"
    assert stack.processes["decider"].poll() is None, stack.log_tail("decider")
