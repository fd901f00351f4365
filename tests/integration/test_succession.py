"""Seed 004 end to end (issue 12): agent A's approved partial refund is dispatched, the
provider's answer is lost and A is gone; agent B claims the transaction once A's lease
lapses, A's later command is fenced (refused and recorded), B's "new" refund with other
parameters under the same transaction is refused with the rule, and recon resolves the
recorded refund by lookup: exactly one refund reaches the provider. Then the precondition
case: a new attempt of a refund whose charge was partly refunded outside recon meanwhile
is stopped by the balance re-check and sent to a person, with the evidence. Then, with
approvals required: a new attempt is refused while the charge's authorization is revoked
and allowed once it holds again and a fresh approval exists."""

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from support.governance_support import OPERATOR
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


def charge(tx_id: str) -> dict[str, Any]:
    return {
        "tx_id": tx_id,
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


async def unknown(recon: Recon, tx_id: str) -> None:
    await recon.wait_until(
        tx_id,
        lambda tx: op(tx, "partial_refund")["state"] == "unknown",
        30,
        f"the refund of {tx_id} never went unknown",
    )


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
    await unknown(recon, "refund-42")

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
        json={
            "agent_id": "agent-A",
            "session_id": "s-A",
            "owner_token": recon.owners["refund-42"]["owner_token"],
            "action": "partial_refund",
        },
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
    assert (await recon.submit(charge("charge-43"))).status_code == 202
    charged = await recon.wait_terminal("charge-43")
    charge_id = op(charged, "charge")["remote_id"]
    await recon.arm("payments.refund", "error_500_before_commit")
    await recon.arm("payments.refund", "lookup_unavailable", times=1000)
    accepted = await recon.submit(refund(600, "agent-A", "s-A2", "refund-43", charge_id))
    assert accepted.status_code == 202, accepted.text
    second = accepted.json()["operations"][0]["op_key"]
    await unknown(recon, "refund-43")
    outside = await recon.http.post(
        f"{stack.sandbox_url}/v1/dashboard/refund", json={"charge": charge_id, "amount": 500}
    )
    assert outside.status_code == 200, outside.text
    await recon.http.delete(f"{stack.sandbox_url}/v1/faults")
    stopped = await recon.wait_until(
        "refund-43",
        lambda tx: tx["status"] == "manual_review",
        60,
        "the stopped attempt was not sent to a person",
    )
    assert op(stopped, "partial_refund")["state"] == "manual_review"
    last = op(stopped, "partial_refund")["evidence"][-1]
    assert last["reason"] == "precondition_failed", last
    assert last["attempt"] == 2 and "precondition_failed" in last["error"], last
    assert last["body"]["balance"]["refundable"] == 500
    # A person decides: the refund did not happen and will not (the customer was refunded
    # from the dashboard); the transaction fails, nothing more reaches the provider.
    [review] = [r for r in await recon.open_reviews() if r["tx_id"] == "refund-43"]
    assert review["reason"] == "precondition_failed"
    resolved = await recon.http.post(
        f"{url}/v1/reviews/{review['id']}/resolve",
        json={"resolution": "not_applied", "note": "refunded on the dashboard"},
        headers=OPERATOR,
    )
    assert resolved.status_code == 200, resolved.text
    await recon.wait_until(
        "refund-43", lambda tx: tx["status"] == "failed", 60, "the resolution did not fail it"
    )
    # The stopped attempt never reached the provider: one call, refused by the fault.
    assert [
        (c["kind"], c["outcome"]) for c in await recon.calls(second) if c["kind"] == "apply"
    ] == [("apply", "failed")]
    refunds = [
        e for e in await recon.effects("payments.refund") if e["payload"].get("charge") == charge_id
    ]
    assert [e["metadata"] for e in refunds] == [{"source": "dashboard"}]


@pytest.fixture
async def gated(stack_with: StackWith) -> AsyncIterator[tuple[Stack, Recon]]:
    """Refunds (irreversible) wait for a person's approval."""
    async with stack_with(
        RECON_OWNER_LEASE_S=str(LEASE_S),
        RECON_APPROVAL_REQUIRED="destructive,irreversible",
        RECON_RECONCILE_AFTER_S="1",
        RECON_RECONCILE_BACKOFF_MAX_S="2",
        RECON_RECONCILE_BUDGET="30",
    ) as pair:
        yield pair


async def test_a_new_attempt_needs_the_precondition_again_and_a_fresh_approval(
    gated: tuple[Stack, Recon],
) -> None:
    """Seed 004, the refund definitively failed: A's approved refund fails before the
    provider commits and A is gone; the charge's authorization is revoked outside recon
    meanwhile. B's new attempt is refused while it is revoked, and made, once, when it
    holds again and a person approved again."""
    stack, recon = gated
    url = stack.intake_url
    assert (await recon.submit(charge("charge-50"))).status_code == 202
    charge_id = op(await recon.wait_terminal("charge-50"), "charge")["remote_id"]
    body = refund(400, "agent-A", "s-A", "refund-50", charge_id)

    async def approvals_recorded() -> int:
        tx = (await recon.get("refund-50")).json()
        trail = op(tx, "partial_refund")["evidence"]
        return sum(1 for e in trail if e.get("event") == "OperationApproved")

    async def approve_now() -> None:
        """Preview, approve, and wait until the decider recorded the approval."""
        before = await approvals_recorded()
        previewed = await recon.http.post(f"{url}/v1/previews", json=body, headers=recon.headers)
        assert previewed.status_code == 200, previewed.text
        approved = await recon.http.post(
            f"{url}/v1/approvals",
            json={
                "tx_id": "refund-50",
                "action": "partial_refund",
                "digest": previewed.json()["digest"],
            },
            headers=OPERATOR,
        )
        assert approved.status_code == 201, approved.text

        async def recorded() -> bool:
            return await approvals_recorded() > before

        await _until(recorded, "the approval was not recorded")

    async def open_review(after: str | None = None) -> dict[str, Any]:
        """The refund's open review (one opened after review `after` was, if given)."""

        async def found() -> dict[str, Any] | None:
            for review in await recon.open_reviews():
                if review["tx_id"] == "refund-50" and review["id"] != after:
                    return review
            return None

        review: dict[str, Any] = await _until(found, f"no review after {after}", 60)
        return review

    async def retry(review: dict[str, Any]) -> httpx.Response:
        return await recon.http.post(
            f"{url}/v1/reviews/{review['id']}/resolve",
            json={"resolution": "retry", "note": "try it again"},
            headers=OPERATOR,
        )

    # A's refund, approved, fails before the provider commits; lookups are down.
    await recon.arm("payments.refund", "error_500_before_commit")
    await recon.arm("payments.refund", "lookup_unavailable", times=1000)
    accepted = await recon.submit(body)
    assert accepted.status_code == 202, accepted.text
    key = accepted.json()["operations"][0]["op_key"]
    await recon.wait_until(
        "refund-50",
        lambda tx: op(tx, "partial_refund")["state"] == "awaiting_approval",
        30,
        "the refund never waited for approval",
    )
    await approve_now()
    await unknown(recon, "refund-50")

    # A is gone; B claims once A's lease lapsed.
    async def claimed() -> bool:
        answer = await recon.http.post(
            f"{url}/v1/transactions/refund-50/claim",
            json={"agent_id": "agent-B", "session_id": "s-B"},
            headers=recon.headers,
        )
        return answer.status_code == 200

    await _until(claimed, "B could never claim", timeout=LEASE_S + 30)

    # Outside recon, the charge's authorization is revoked. Lookups answer again: the
    # first attempt is proven absent, and the new attempt is stopped by the re-check.
    revoked = await recon.http.post(
        f"{stack.sandbox_url}/v1/dashboard/revoke", json={"charge": charge_id}
    )
    assert revoked.status_code == 200, revoked.text
    await recon.http.delete(f"{stack.sandbox_url}/v1/faults")
    stopped = await open_review()
    assert stopped["reason"] == "precondition_failed"

    def stop_recorded(tx: dict[str, Any]) -> bool:
        # The review's row and the operation's evidence are separate projections: wait for
        # the evidence of the stop rather than read it once.
        body = op(tx, "partial_refund")["evidence"][-1].get("body")
        return isinstance(body, dict) and "balance" in body

    tx = await recon.wait_until("refund-50", stop_recorded, 30, "the stop's evidence is missing")
    last = op(tx, "partial_refund")["evidence"][-1]
    assert last["body"]["balance"]["revoked"] is True, last

    # B's new attempt while it is still revoked: approved again, retried, and stopped
    # again by the re-check (attempt 3), never sent.
    await approve_now()
    assert (await retry(stopped)).status_code == 200
    again = await open_review(after=stopped["id"])
    assert again["reason"] == "precondition_failed"

    # It holds again. A retry on the approval attempt 3 spent is refused, nothing is
    # produced and the review stays open; with a fresh approval the retry is made, once.
    reinstated = await recon.http.post(
        f"{stack.sandbox_url}/v1/dashboard/reinstate", json={"charge": charge_id}
    )
    assert reinstated.status_code == 200, reinstated.text
    refused = await retry(again)
    assert (refused.status_code, refused.json()["error"]) == (409, "attempt_refused")
    assert "approval_required" in refused.json()["message"]
    assert any(r["id"] == again["id"] for r in await recon.open_reviews())
    await approve_now()
    assert (await retry(again)).status_code == 200
    await recon.wait_until(
        "refund-50", lambda tx: tx["status"] == "committed", 60, "the approved retry did not run"
    )

    # At the provider: attempts 2 and 3 never left recon; one refund, under the one key.
    applies = [c for c in await recon.calls(key) if c["kind"] == "apply"]
    assert [c["outcome"] for c in applies] == ["failed", "applied"], applies
    refunds = [
        e for e in await recon.effects("payments.refund") if e["payload"].get("charge") == charge_id
    ]
    assert [(e["idempotency_key"], e["payload"]["amount"]) for e in refunds] == [(key, 400)]
