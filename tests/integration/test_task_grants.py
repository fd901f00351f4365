"""Least privilege per task (issue 22, item 2), on real Kafka and Postgres: an operator grants
a task a bounded set of operations, an amount per call and an expiry in the policy document;
a submission naming the task is refused at the door (403, the rule named) for anything
outside it, whatever its agent's own grants; and the task is re-judged right before each
call, so a task revoked or expired after the submission was accepted stops the dispatch:
the sandbox sees no call at all.
"""

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from support.governance_support import (
    AGENT,
    OPERATOR,
    command_tx_ids,
    hold_agent_7,
    put_policy,
    until,
)
from support.recon_client import op, transaction
from support.stack_fixtures import StackWith

# The agent's own grants are wide (the receipt included): the task narrows them.
AGENT_GRANTS = ["inventory.reserve", "payments.charge", "email.send"]
TASK_GRANTS = ["inventory.reserve", "payments.charge"]
EXPIRES_IN_S = 15


def under(task_id: str, tx_id: str, *, receipt: bool = False) -> dict[str, Any]:
    return {**transaction(tx_id, receipt=receipt), "task_id": task_id}


def task(expires_at: datetime, max_amount: int = 5000) -> dict[str, Any]:
    return {"grants": TASK_GRANTS, "max_amount": max_amount, "expires_at": expires_at.isoformat()}


async def test_a_task_bounds_its_submissions_at_the_door_and_at_each_call(
    stack_with: StackWith,
) -> None:
    async with stack_with() as (stack, recon):
        http, url = recon.http, stack.intake_url
        later = datetime.now(UTC) + timedelta(hours=1)
        soon = datetime.now(UTC) + timedelta(seconds=EXPIRES_IN_S)
        tasks = {
            "order-42": task(later),
            "small": task(later, max_amount=1000),
            "brief": task(soon),
        }
        v1 = {
            "version": 1,
            "agents": {"agent-7": {"grants": AGENT_GRANTS}},
            "tasks": tasks,
        }
        installed = await put_policy(http, url, v1)
        assert installed.status_code == 200, installed.text

        # Outside the task's grant: refused at the door with the rule named, although
        # the agent itself is granted the receipt; an amount above the task's cap and a
        # task nobody granted likewise.
        refusals = {
            "task-receipt": (under("order-42", "task-receipt", receipt=True)),
            "task-amount": under("small", "task-amount"),
            "task-unknown": under("nope", "task-unknown"),
        }
        answers = {tx_id: await recon.submit(body) for tx_id, body in refusals.items()}
        for answer in answers.values():
            assert answer.status_code == 403, answer.text
        seen = {
            tx_id: (a.json()["error"], a.json()["rule"], a.json()["operation"])
            for tx_id, a in answers.items()
        }
        assert seen == {
            "task-receipt": ("not_granted", "tasks.order-42.grants", "email.send"),
            "task-amount": ("not_granted", "tasks.small.max_amount", "payments.charge"),
            "task-unknown": ("task_unknown", "tasks.nope", "inventory.reserve"),
        }

        # Within the grant: accepted and committed; the agent's grants still apply too.
        allowed = await recon.submit(under("order-42", "task-allowed"))
        assert allowed.status_code == 202, allowed.text
        assert (await recon.wait_terminal("task-allowed"))["status"] == "committed"

        # Accepted under a task, then the task is revoked (removed from the document)
        # or expires before the call: a kill switch holds the calls meanwhile, so the
        # order of events is certain.
        switch_id = await hold_agent_7(http, stack, "hold for the test")
        for task_id, tx_id in (("order-42", "task-revoked"), ("brief", "task-expired")):
            accepted = await recon.submit(under(task_id, tx_id))
            assert accepted.status_code == 202, accepted.text

        async def held() -> bool:
            listed = (await http.get(f"{url}/v1/kill-switches", headers=AGENT)).json()
            return bool(listed["kill_switches"][0]["held"] == 2)

        await until(held, "both first steps held by the switch")
        v2 = {**v1, "version": 2, "tasks": {"brief": tasks["brief"]}}
        assert (await put_policy(http, url, v2)).status_code == 200
        await asyncio.sleep(max(0.0, (soon - datetime.now(UTC)).total_seconds()) + 0.5)
        released = await http.delete(f"{url}/v1/kill-switches/{switch_id}", headers=OPERATOR)
        assert released.status_code == 200

        for tx_id in ("task-revoked", "task-expired"):
            tx = await recon.wait_terminal(tx_id)
            assert tx["status"] == "manual_review", tx
            assert op(tx, "reserve")["state"] == "manual_review"
            # Not one call reached the provider, for any step of either transaction.
            for action in ("reserve", "charge"):
                assert await recon.calls(op(tx, action)["op_key"]) == []
        reviews = (await http.get(f"{url}/v1/reviews", headers=AGENT)).json()["reviews"]
        reasons = {r["tx_id"]: r["reason"] for r in reviews}
        assert reasons == {"task-revoked": "task_unknown", "task-expired": "task_expired"}

        # Nothing of the refused submissions in Kafka.
        named = await command_tx_ids(stack.kafka_bootstrap, stack.topic_prefix)
        assert {"task-allowed", "task-revoked", "task-expired"} <= named
        assert not set(refusals) & named
