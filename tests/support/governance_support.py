"""What the governance tests share: the operator's requests and the recon.governance log."""

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from events.topics import Topics
from services.devtools.stack import Stack
from support.topic_records import read_records

OPERATOR = {"Authorization": "Bearer ops-key"}
AGENT = {"Authorization": "Bearer demo-key"}


async def put_policy(
    http: httpx.AsyncClient, intake_url: str, document: dict[str, Any]
) -> httpx.Response:
    return await http.put(f"{intake_url}/v1/policy", json=document, headers=OPERATOR)


async def governance_log(bootstrap: str, prefix: str) -> list[dict[str, Any]]:
    records = await read_records(bootstrap, Topics(prefix).governance)
    return [json.loads(r.value) for r in records if r.value is not None]


async def command_tx_ids(bootstrap: str, prefix: str) -> set[str]:
    """Every tx_id named by a record on recon.commands."""
    records = await read_records(bootstrap, Topics(prefix).commands)
    return {json.loads(r.value).get("tx_id") for r in records if r.value is not None}


def charge(tx_id: str, *, agent_id: str = "agent-7", amount: int = 1299) -> dict[str, Any]:
    """A one-step transaction: a charge, refunded if it must be undone."""
    return {
        "tx_id": tx_id,
        "agent_id": agent_id,
        "steps": [
            {
                "action": "charge",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": {"amount": amount, "currency": "usd", "customer": f"cus_{tx_id}"},
                "compensation": {"operation": "payments.refund"},
            }
        ],
    }


async def switches_the_dispatcher_acts_on(stack: Stack) -> float:
    """The dispatch gate's own view of the engaged kill switches (the decider's metrics
    gauge: the decider hosts dispatch): once it counts a switch, every later call of that
    decider is held by it. Engaging takes
    effect within a second (README, "Kill switch"); this says exactly when it did."""
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(stack.metrics_url("decider"))).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "recon_kill_switches_engaged"
    )


async def until(probe: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        await asyncio.sleep(0.1)


async def hold_agent_7(http: httpx.AsyncClient, stack: Stack, reason: str) -> str:
    """A kill switch engaged on agent-7, once the dispatcher acts on it: its id."""
    engaged = await http.post(
        f"{stack.intake_url}/v1/kill-switches",
        json={"scope": {"agent_id": "agent-7"}, "reason": reason},
        headers=OPERATOR,
    )
    assert engaged.status_code == 201, engaged.text

    async def in_effect() -> bool:
        return await switches_the_dispatcher_acts_on(stack) == 1

    await until(in_effect, "the switch in the dispatcher's view")
    return str(engaged.json()["id"])
