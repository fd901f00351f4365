"""Intent identity on the real stack (issue 22, item 1): an agent that re-plans mints a new
tx_id for the same order; with the order id as the charge's natural key, its re-planned
submissions never reach the provider, whichever door they race through (four HTTP
submissions and one on the Kafka intents topic at once), through the MCP server, and after
the intake was killed and restarted. The proof is the provider's own call log (one charge
applied), not recon's rows. Real processes (the stack), real Kafka and Postgres.

One stack for the module (support.stack_fixtures.module_stack): each test plans an order of
its own (ORDER, STEADY_ORDER) under transaction ids of its own; the first counts the charges
applied since it started (every earlier test's transactions are settled by then), the
second the applies under its own charge's key. The first test kills the intake and waits
until the one it starts again is ready before it goes on, so the stack is whole again when
the next test begins.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import time
from typing import Any

import httpx
from aiokafka import AIOKafkaProducer
from mcp import Client, StdioServerParameters
from mcp.types import TextContent
from support.recon_client import Recon, op
from support.stack_fixtures import module_stack
from support.topic_records import read_records

from events.topics import Topics
from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack
from services.intake.example import example_transaction

stack = module_stack

ORDER = "order-42"
STEADY_ORDER = "order-43"


def planned(tx_id: str, amount: int = 1299, order: str = ORDER) -> dict[str, Any]:
    """The agent's plan for `order` under `tx_id`: the charge carries the order id."""
    body = copy.deepcopy(example_transaction(tx_id))
    charge = body["steps"][1]
    charge["payload"]["amount"] = amount
    charge["natural_key"] = order
    return body


async def charges_applied(recon: Recon) -> int:
    calls = await recon.calls()
    return sum(1 for c in calls if c["kind"] == "apply" and c["operation"] == "payments.charge")


async def kafka_answer(stack: Stack, tx_id: str, after: int, timeout: float = 60) -> dict[str, Any]:
    """The intents door's reply for `tx_id` at an offset past `after` records of its topic."""
    topic = Topics(stack.topic_prefix).intent_replies("demo")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [
            json.loads(r.value)
            for r in await read_records(stack.kafka_bootstrap, topic)
            if r.key == tx_id.encode() and r.value is not None
        ]
        if len(found) > after:
            answer: dict[str, Any] = found[-1]
            return answer
        await asyncio.sleep(0.3)
    raise AssertionError(f"no reply for {tx_id} within {timeout}s")


async def until_settled_refusal(submit: Any, tx_id: str, timeout: float = 120) -> dict[str, Any]:
    """Resubmit while the answer is `intent_pending` (the holder not yet acknowledged)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = await submit(tx_id)
        if body.get("error") != "intent_pending" or time.monotonic() > deadline:
            return {**body, "http": status}
        await asyncio.sleep(1)


async def test_a_replanned_duplicate_never_reaches_the_provider_through_any_door(
    stack: Stack, recon: Recon
) -> None:
    earlier = await charges_applied(recon)
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, acks="all")
    await producer.start()
    kafka_sent: dict[str, int] = {}

    async def over_http(tx_id: str) -> tuple[int, dict[str, Any]]:
        response = await recon.submit(planned(tx_id))
        return response.status_code, response.json()

    async def over_kafka(tx_id: str) -> tuple[int, dict[str, Any]]:
        topic = Topics(stack.topic_prefix).intents("demo")
        after = kafka_sent.get(tx_id, 0)
        kafka_sent[tx_id] = after + 1
        value = json.dumps(planned(tx_id)).encode()
        await producer.send_and_wait(topic, key=f"demo/{tx_id}".encode(), value=value)
        answer = await kafka_answer(stack, tx_id, after)
        return answer.get("http_status", 202), answer

    try:
        # Five re-plans of one order race through two doors at once.
        doors = {f"plan-{n}": over_http for n in range(4)} | {"plan-kafka": over_kafka}
        first = await asyncio.gather(*(door(tx) for tx, door in doors.items()))
        answers = dict(zip(doors, first, strict=True))
        winners = [tx for tx, (status, _) in answers.items() if status == 202]
        assert len(winners) == 1, answers
        winner = winners[0]
        for tx_id, (status, body) in answers.items():
            if tx_id != winner:
                assert status == 409, (tx_id, body)
                assert body["error"] in ("duplicate_intent", "intent_pending"), (tx_id, body)
        settled = await recon.wait_terminal(winner)
        assert settled["status"] == "committed", settled

        # Each loser, once the holder is known, is told which transaction holds the order.
        for tx_id in answers:
            if tx_id == winner:
                continue
            refusal = await until_settled_refusal(doors[tx_id], tx_id)
            assert refusal["http"] == 409 and refusal["error"] == "duplicate_intent", refusal
            held = refusal["duplicate_of"]
            assert held["tx_id"] == winner and held["status"] == "committed", refusal
            assert held["natural_key"] == ORDER and held["operation"] == "payments.charge"
            assert (await recon.get(tx_id)).status_code == 404

        # Through the MCP server (its submissions go through the SDK to the same intake).
        env = {"RECON_MCP_API_KEY": "demo-key", "RECON_MCP_INTAKE_URL": stack.intake_url}
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "services.mcp"], env=env, cwd=REPO_ROOT
        )
        async with Client(params) as client:
            # The agent is the server's (RECON_MCP_AGENT_ID), never the model's.
            mcp_body = {k: v for k, v in planned("mcp").items() if k != "agent_id"}
            refused = await client.call_tool("submit_transaction", {"transaction": mcp_body})
            text = " ".join(c.text for c in refused.content if isinstance(c, TextContent))
            assert refused.is_error and "duplicate_intent: " in text, text

        # Across restarts: the claim is Postgres's, not the intake process's memory.
        stack.kill("intake")
        stack.processes.pop("intake")
        stack.start("intake")
        await stack.wait_ready()
        after_restart = await recon.submit(planned("plan-after-restart"))
        assert after_restart.status_code == 409, after_restart.text
        assert after_restart.json()["duplicate_of"]["tx_id"] == winner

        # Another amount under the same order id: not refused, not sent either; a person
        # decides (the charge waits for an approval, the key stays with the winner).
        corrected = await recon.submit(planned("plan-corrected", amount=4200))
        assert corrected.status_code == 202, corrected.text
        waiting = await recon.wait_until(
            "plan-corrected",
            lambda tx: tx["status"] == "awaiting_approval",
            60,
            "the corrected charge never waited for a person",
        )
        charge = next(o for o in waiting["operations"] if o["action"] == "charge")
        assert charge["state"] == "awaiting_approval", waiting

        # The provider's own log: one charge for the order, whatever came through the doors.
        assert await charges_applied(recon) == earlier + 1

        # The person decides it is a second charge of its own: previewed and approved by an
        # operator, it goes through once (the gate is the ordinary approval's).
        preview = await recon.http.post(
            f"{recon.intake_url}/v1/previews",
            json=planned("plan-corrected", amount=4200),
            headers=recon.headers,
        )
        assert preview.status_code == 200, preview.text
        approved = await recon.http.post(
            f"{recon.intake_url}/v1/approvals",
            json={
                "tx_id": "plan-corrected",
                "action": "charge",
                "digest": preview.json()["digest"],
            },
            headers={"Authorization": "Bearer ops-key"},
        )
        assert approved.status_code == 201, approved.text
        assert (await recon.wait_terminal("plan-corrected"))["status"] == "committed"
        assert await charges_applied(recon) == earlier + 2
    finally:
        await producer.stop()


async def test_the_same_tx_id_retried_keeps_its_natural_key(stack: Stack, recon: Recon) -> None:
    # The documented way: one tx_id per intent, reused on every retry, is simply idempotent.
    first = await recon.submit(planned("steady", order=STEADY_ORDER))
    again = await recon.submit(planned("steady", order=STEADY_ORDER))
    assert (first.status_code, again.status_code) in ((202, 200), (202, 202)), again.text
    assert first.json()["operations"] == again.json()["operations"]
    done = await recon.wait_terminal("steady")
    assert done["status"] == "committed", done
    # One apply under its charge's key (the retry's keys are the first's, asserted above):
    # counted by key, so an earlier test's charges still in flight (it failed) count not.
    await recon.assert_applied_once(op(done, "charge")["op_key"])
    async with httpx.AsyncClient() as http:
        assert (await http.get(stack.intake_url + "/healthz")).status_code == 200
