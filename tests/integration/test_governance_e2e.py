"""Seed 003's five checks end to end on the real stack (Kafka, Postgres, the sandbox and
every recon process), around the destructive, compensating-only `waitlist.promote`:

1. the same idempotency key twice: one effect;
2. a revision changed after the plan: the old proposal is refused (`stale_revision`);
3. an approval followed by a changed parameter: void (`digest_mismatch`), nothing runs;
4. a commit whose response times out: not blindly redone (one call, settled by a lookup);
5. a failed compensation: in review, with its trail.

Plus the preview computed by the provider from its own state (the displaced user and the
notification), an approval bound to it, and an apply that matches it.
"""

from typing import Any

import httpx
from support.recon_client import Recon, op

from services.devtools.stack import Stack

OPS = {"Authorization": "Bearer ops-key"}  # the operator key of the default configuration


def promotion(tx_id: str, user: str, revision: int, **extra: Any) -> dict[str, Any]:
    return {
        "tx_id": tx_id,
        "agent_id": "agent-7",
        "steps": [
            {
                "action": "promote",
                "provider": "sandbox",
                "operation": "waitlist.promote",
                "resource": "class-0700",
                "expected_revision": revision,
                "payload": {"user": user},
                "compensation": {"operation": "waitlist.restore", **extra},
            },
            {
                "action": "charge",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": {"amount": 1500, "currency": "usd", "customer": "cus_1"},
                "compensation": {"operation": "payments.refund"},
            },
        ],
    }


class Gov:
    def __init__(self, recon: Recon) -> None:
        self.recon = recon
        self.http = recon.http

    async def preview(self, body: dict[str, Any]) -> httpx.Response:
        return await self.http.post(
            f"{self.recon.intake_url}/v1/previews", json=body, headers=self.recon.headers
        )

    async def approve(
        self, tx_id: str, digest: str, headers: dict[str, str] = OPS
    ) -> httpx.Response:
        return await self.http.post(
            f"{self.recon.intake_url}/v1/approvals",
            json={"tx_id": tx_id, "action": "promote", "digest": digest, "expires_in_s": 600},
            headers=headers,
        )

    async def waiting(self, tx_id: str) -> dict[str, Any]:
        return await self.recon.wait_until(
            tx_id,
            lambda t: t["status"] == "awaiting_approval",
            timeout=60,
            failure=f"{tx_id} never waited for approval",
        )

    async def waitlist(self) -> dict[str, Any]:
        answer = await self.http.get(f"{self.recon.sandbox_url}/v1/waitlists/class-0700")
        found: dict[str, Any] = answer.json()
        return found


async def test_seed_003_checks_around_an_approved_waitlist_promotion(
    stack: Stack, recon: Recon
) -> None:
    gov = Gov(recon)
    users = ["u1", "u2", "u3", "u4", "u5", "u6"]
    seeded = await recon.http.post(
        f"{recon.sandbox_url}/v1/waitlists",
        json={"resource": "class-0700", "users": users, "revision": 41},
    )
    assert seeded.status_code == 201

    # The preview is the provider's: the displaced user and the notification come from its
    # state, not from the proposal.
    body = promotion("promo-1", "u6", 41)
    previewed = await gov.preview(body)
    assert previewed.status_code == 200, previewed.text
    preview = previewed.json()
    (step,) = [s for s in preview["steps"] if s["action"] == "promote"]
    assert step["current_revision"] == 41 and step["approval_required"] is True
    assert step["effects"]["actor_position"] == {"from": 6, "to": 5}
    assert step["effects"]["displaced"] == [{"user": "u5", "position": {"from": 5, "to": 6}}]
    assert [n["to"] for n in step["notifications"]] == ["u5"]
    assert step["reversibility"] == "compensating_only"

    accepted = await recon.submit(body)
    assert accepted.status_code == 202, accepted.text
    tx = await gov.waiting("promo-1")
    key = op(tx, "promote")["op_key"]
    assert op(tx, "promote")["state"] == "awaiting_approval"
    assert await recon.calls(key) == []  # nothing reached the provider

    # Separation of duties: an agent key cannot approve; a digest that is not the
    # preview's is refused.
    assert (await gov.approve("promo-1", preview["digest"], recon.headers)).status_code == 403
    lapsed = await recon.http.post(
        f"{recon.intake_url}/v1/approvals",
        json={
            "tx_id": "promo-1",
            "action": "promote",
            "digest": preview["digest"],
            "expires_in_s": 0,
        },
        headers=OPS,
    )
    assert (lapsed.status_code, lapsed.json()["error"]) == (409, "approval_expired")
    wrong = await gov.approve("promo-1", "0" * 64)
    assert (wrong.status_code, wrong.json()["error"]) == (409, "digest_mismatch")

    # Check 4: the commit's answer is lost; the promotion is not sent again.
    await recon.arm("waitlist.promote", "lose_response_after_commit")
    await recon.arm("waitlist.promote", "webhook_drop")
    approved = await gov.approve("promo-1", preview["digest"])
    assert approved.status_code == 201, approved.text
    assert approved.json()["approver"] == "operator"
    tx = await recon.wait_terminal("promo-1")
    assert tx["status"] == "committed", tx
    await recon.assert_applied_once(key)
    # The apply did what the preview said.
    state = await gov.waitlist()
    assert state["users"] == ["u1", "u2", "u3", "u4", "u6", "u5"] and state["revision"] == 42
    assert [n["to"] for n in state["notifications"]] == ["u5"]
    trail = [e.get("event") for e in op(tx, "promote")["evidence"]]
    assert "OperationAwaitingApproval" in trail and "OperationApproved" in trail
    # Single use: the spent approval is refused.
    used = await gov.approve("promo-1", preview["digest"])
    assert (used.status_code, used.json()["error"]) == (409, "approval_used")
    # The durable record holds the grant and the approval trail (docs/contract.md v1).
    record = (
        await recon.http.get(f"{recon.intake_url}/v1/operations/{key}", headers=recon.headers)
    ).json()
    assert [a["type"] for a in record["approvals"]][:2] == [
        "OperationAwaitingApproval",
        "OperationApproved",
    ]
    assert record["approvals"][1]["approver"] == "operator"
    assert record["grant"]["operation"] == "waitlist.promote"
    assert record["grant"]["granted"] is True

    # Check 1: the same intent again (same keys): one effect.
    again = await recon.submit(body)
    assert again.status_code in (200, 202)
    assert [o["op_key"] for o in again.json()["operations"]] == [
        o["op_key"] for o in accepted.json()["operations"]
    ]
    await recon.assert_applied_once(key)

    # Check 3: an approval followed by a changed parameter is void. The approver saw u4's
    # promotion; the agent then asks for u3's: the old digest does not bind it.
    shown = (await gov.preview(promotion("promo-3", "u4", 42))).json()
    changed = promotion("promo-3b", "u3", 42)
    assert (await recon.submit(changed)).status_code == 202
    await gov.waiting("promo-3b")
    void = await gov.approve("promo-3b", shown["digest"])
    assert (void.status_code, void.json()["error"]) == (409, "digest_mismatch")
    # The same tx_id with a changed parameter is refused outright.
    conflict = await recon.submit(promotion("promo-3b", "u2", 42))
    assert conflict.status_code == 409

    # Check 2: the waitlist changes after promo-3b was planned and previewed: approving the
    # old view is refused, and the step ends for good, never re-sent with the new revision.
    stale_view = (await gov.preview(changed)).json()
    reseeded = await recon.http.post(
        f"{recon.sandbox_url}/v1/waitlists",
        json={"resource": "class-0700", "users": users, "revision": 50},
    )
    assert reseeded.status_code == 201
    stale = await gov.approve("promo-3b", stale_view["digest"])
    assert (stale.status_code, stale.json()["error"]) == (409, "stale_revision")
    tx = await recon.wait_terminal("promo-3b")
    assert tx["status"] == "failed", tx
    assert op(tx, "promote")["state"] == "failed"
    # The operation itself says why (docs/contract.md v1): the agent must re-plan.
    assert op(tx, "promote")["reason"] == "stale_revision"
    failed = [e for e in await recon.events("promo-3b") if e["type"] == "TransactionFailed"]
    assert failed[0]["data"]["reason"] == "stale_revision"
    assert await recon.calls(op(tx, "promote")["op_key"]) == []

    # Check 5: the promotion runs, the charge is declined, and the undo is refused by the
    # provider (the promotion was restored outside recon meanwhile, while the charge was
    # held up): the transaction is held for a person, with the whole trail. (The undo's
    # payload is recon's to derive; an agent naming another promotion in it is refused at
    # submission, issue 18, so the refusal comes from the provider's side here.)
    broken = promotion("promo-5", "u6", 50)
    broken["steps"][1]["payload"]["customer"] = "cus_decline"
    view = (await gov.preview(broken)).json()
    assert (await recon.submit(broken)).status_code == 202
    await gov.waiting("promo-5")
    await recon.arm("payments.charge", "delay", delay_ms=3000)
    assert (await gov.approve("promo-5", view["digest"])).status_code == 201
    promoted = await recon.wait_until(
        "promo-5",
        lambda t: op(t, "promote")["state"] == "confirmed",
        timeout=60,
        failure="the promotion was not confirmed",
    )
    outside = await recon.http.post(
        f"{recon.sandbox_url}/v1/waitlist/restore",
        json={"reverses": {"op_key": op(promoted, "promote")["op_key"]}},
        headers={"Idempotency-Key": "restored-outside-recon"},
    )
    assert outside.status_code == 200, outside.text
    tx = await recon.wait_until(
        "promo-5",
        lambda t: t["status"] == "manual_review",
        timeout=60,
        failure="the refused undo was not put in review",
    )
    reviews = (
        await recon.http.get(
            f"{recon.intake_url}/v1/reviews", params={"state": "open"}, headers=OPS
        )
    ).json()["reviews"]
    (review,) = [r for r in reviews if r["tx_id"] == "promo-5"]
    assert review["reason"] == "compensation_rejected"
    detail = (
        await recon.http.get(f"{recon.intake_url}/v1/reviews/{review['id']}", headers=OPS)
    ).json()
    outcomes = [(e["source"], e["outcome"]) for e in detail["evidence"] if "outcome" in e]
    assert ("response", "succeeded") in outcomes  # the promotion itself
    assert ("response", "rejected") in outcomes  # its undo, refused

    # A person refuses a waiting step, by its op_key (an approval's id names it too):
    # an agent key may not; an id that is neither answers 404; the step never runs.
    assert (await recon.submit(promotion("promo-6", "u6", 60))).status_code == 202
    waiting = op(await gov.waiting("promo-6"), "promote")["op_key"]
    base = f"{recon.intake_url}/v1/approvals"
    by_agent = await recon.http.post(f"{base}/{waiting}/reject", headers=recon.headers)
    assert (by_agent.status_code, by_agent.json()["error"]) == (403, "operator_only")
    nowhere = await recon.http.post(f"{base}/ap_{'0' * 32}/reject", headers=OPS)
    assert nowhere.status_code == 404, nowhere.text
    refused = await recon.http.post(f"{base}/{waiting}/reject", json={"note": "no"}, headers=OPS)
    assert refused.status_code == 202, refused.text
    tx = await recon.wait_terminal("promo-6")
    assert tx["status"] == "failed" and op(tx, "promote")["reason"] == "rejected", tx
    assert await recon.calls(waiting) == []
    # The step is over: refusing it again is answered 409, and nothing is recorded.
    logged = await recon.events("promo-6")
    again = await recon.http.post(f"{base}/{waiting}/reject", headers=OPS)
    assert (again.status_code, again.json()["error"]) == (409, "not_awaiting_approval")
    assert await recon.events("promo-6") == logged

    # Kill switches are an operator's too: an agent key is refused before anything else.
    switches = f"{recon.intake_url}/v1/kill-switches"
    scope = {"scope": {"agent_id": "agent-7"}, "reason": "mine"}
    for refused in (
        await recon.http.post(switches, json=scope, headers=recon.headers),
        await recon.http.delete(f"{switches}/ks_any", headers=recon.headers),
    ):
        assert (refused.status_code, refused.json()["error"]) == (403, "operator_only")
