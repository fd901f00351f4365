"""Seed 004 end to end (issue 12): agent A's approved partial refund is dispatched, the
provider's answer is lost and A is gone; agent B claims the transaction once A's lease
lapses, A's later command is fenced (refused and recorded), B's "new" refund with other
parameters under the same transaction is refused with the rule, and recon resolves the
recorded refund by lookup: exactly one refund reaches the provider. Then the precondition
case: a new attempt of a refund whose charge was partly refunded outside recon meanwhile
is stopped by the balance re-check, with the evidence."""

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from support.recon_client import Recon, op
from support.stack_fixtures import StackWith

from services.devtools.stack import Stack

LEASE_S = 2


@pytest.fixture
async def leased(stack_with: StackWith) -> AsyncIterator[tuple[Stack, Recon]]:
    async with stack_with(
        RECON_OWNER_LEASE_S=str(LEASE_S),
        # The reconciler settles the unknown refund soon after the faults are lifted.
        RECON_RECONCILE_AFTER_S="1",
        RECON_RECONCILE_BACKOFF_MAX_S="2",
        RECON_RECONCILE_BUDGET="30",
    ) as pair:
        yield pair


def refund(
    amount: int, agent: str, session: str, tx_id: str = "refund-42", charge: str = "ch_004"
) -> dict[str, Any]:
    return {
        "tx_id": tx_id,
        "agent_id": agent,
        "session_id": session,
        "steps": [
            {
                "action": "partial_refund",
                "provider": "sandbox",
                "operation": "payments.refund",
                "payload": {"amount": amount, "currency": "usd", "charge": charge},
            }
        ],
    }


async def _until(check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def test_a_successor_inherits_the_recorded_refund_and_a_stale_precondition_stops_a_retry(
    leased: tuple[Stack, Recon],
) -> None:
    stack, recon = leased
    url, headers = stack.intake_url, recon.headers
    # The refund's answer is lost, the webhook dropped and lookups down: it stays unknown
    # while A disappears and B takes over.
    await recon.arm("payments.refund", "lose_response_after_commit")
    await recon.arm("payments.refund", "webhook_drop")
    await recon.arm("payments.refund", "lookup_unavailable", times=1000)
    accepted = await recon.submit(refund(500, "agent-A", "s-A"))
    assert accepted.status_code == 202, accepted.text
    key = accepted.json()["operations"][0]["op_key"]
    await recon.wait_until(
        "refund-42",
        lambda tx: op(tx, "partial_refund")["state"] == "unknown",
        30,
        "the refund never went unknown",
    )

    # B may claim only once A's lease has lapsed; until then 409 lease_held.
    async def claimed() -> bool:
        answer = await recon.http.post(
            f"{url}/v1/transactions/refund-42/claim",
            json={"agent_id": "agent-B", "session_id": "s-B"},
            headers=headers,
        )
        assert answer.status_code in (200, 409), answer.text
        assert answer.status_code == 200 or answer.json()["error"] == "lease_held"
        return answer.status_code == 200

    await _until(claimed, "B could never claim", timeout=LEASE_S + 30)

    async def record() -> dict[str, Any]:
        answer = await recon.http.get(f"{url}/v1/operations/{key}", headers=headers)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    async def owned_by_b() -> bool:
        owner: dict[str, Any] = (await record())["owner"]
        return bool(owner["session_id"] == "s-B")

    await _until(owned_by_b, "the claim never reached the record")

    # A's process comes back and tries to abort: fenced, and the refusal is on the chain.
    fenced = await recon.abort(
        "refund-42", {"agent_id": "agent-A", "session_id": "s-A", "reason": "A is back"}
    )
    assert fenced.status_code == 409 and fenced.json()["error"] == "fenced", fenced.text

    async def fence_recorded() -> list[dict[str, Any]]:
        return [r for r in (await record())["refusals"] if r["reason"] == "fenced"]

    [refusal] = await _until(fence_recorded, "A's fenced abort was not recorded")
    assert (refusal["command"], refusal["session_id"]) == ("AbortTransaction", "s-A")
    # Nor may A ask a person to review it any more.
    asked = await recon.http.post(
        f"{url}/v1/transactions/refund-42/review",
        json={"agent_id": "agent-A", "session_id": "s-A", "action": "partial_refund"},
        headers=headers,
    )
    assert asked.status_code == 409 and asked.json()["error"] == "fenced", asked.text

    async def both_recorded() -> bool:
        return len(await fence_recorded()) == 2

    await _until(both_recorded, "A's fenced review request was not recorded")

    # B re-plans from the customer's request: a "new" refund with another amount under
    # the same transaction is refused, naming the rule and what it would change.
    replanned = await recon.submit(refund(700, "agent-B", "s-B"))
    assert replanned.status_code == 409, replanned.text
    message = replanned.json()["message"]
    assert "operations_immutable" in message and "payload.amount 500 -> 700" in message

    # The provider answers lookups again: recon settles the recorded refund by lookup.
    await recon.http.delete(f"{stack.sandbox_url}/v1/faults")
    tx = await recon.wait_terminal("refund-42", timeout=60)
    assert tx["status"] == "committed"
    assert op(tx, "partial_refund")["state"] == "confirmed"
    # Exactly one refund at the provider, with the approved amount, under the one key.
    refunds = await recon.effects("payments.refund")
    assert [(e["idempotency_key"], e["payload"]["amount"]) for e in refunds] == [(key, 500)]
    await recon.assert_applied_once(key)
    final = await record()
    assert [(s["from"]["session_id"], s["to"]["session_id"]) for s in final["successions"]] == [
        ("s-A", "s-B")
    ]
    assert final["approved"]["payload"]["amount"] == 500
    assert [d["attempt"] for d in final["dispatches"]] == [1]

    # The precondition case, on the same stack: a refund of a real charge fails before the
    # provider commits; while it is unknown an operator refunds from the provider's
    # dashboard, outside recon; the new attempt recon would make once a lookup proves the
    # first absent is stopped by the balance re-check, with the balance as evidence.
    charge_tx = {
        "tx_id": "charge-43",
        "agent_id": "agent-A",
        "steps": [
            {
                "action": "charge",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": {"amount": 1000, "currency": "usd", "customer": "cus_1"},
            }
        ],
    }
    assert (await recon.submit(charge_tx)).status_code == 202
    charged = await recon.wait_terminal("charge-43")
    charge_id = op(charged, "charge")["remote_id"]
    await recon.arm("payments.refund", "error_500_before_commit")
    await recon.arm("payments.refund", "lookup_unavailable", times=1000)
    accepted = await recon.submit(refund(600, "agent-A", "s-A2", "refund-43", charge_id))
    assert accepted.status_code == 202, accepted.text
    second = accepted.json()["operations"][0]["op_key"]
    await recon.wait_until(
        "refund-43",
        lambda tx: op(tx, "partial_refund")["state"] == "unknown",
        30,
        "the second refund never went unknown",
    )
    outside = await recon.http.post(
        f"{stack.sandbox_url}/v1/dashboard/refund", json={"charge": charge_id, "amount": 500}
    )
    assert outside.status_code == 200, outside.text
    await recon.http.delete(f"{stack.sandbox_url}/v1/faults")
    stopped = await recon.wait_terminal("refund-43", timeout=60)
    assert stopped["status"] == "failed"
    last = op(stopped, "partial_refund")["evidence"][-1]
    assert last["attempt"] == 2 and "precondition_failed" in last["error"], last
    assert last["body"]["balance"]["refundable"] == 500
    # The stopped attempt never reached the provider: one call, refused by the fault.
    assert [
        (c["kind"], c["outcome"]) for c in await recon.calls(second) if c["kind"] == "apply"
    ] == [("apply", "failed")]
    refunds = [
        e for e in await recon.effects("payments.refund") if e["payload"].get("charge") == charge_id
    ]
    assert [e["metadata"] for e in refunds] == [{"source": "dashboard"}]
