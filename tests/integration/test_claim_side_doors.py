"""Issue 18, items 5, 8 and 16, against the real broker and database: a claim right after
the submission's 202 is judged like any other (`409 lease_held`, not `404`); a claimant not
granted the transaction's operations is refused (`403 not_granted`) with nothing recorded;
an agent's abort must name and prove its session (`403 session_required`,
`403 owner_token_invalid`, nothing recorded); after a granted successor's claim the
predecessor's abort through the client that submitted (its remembered owner token) is
fenced; and the call the successor's approval releases is charged to the successor: its
own quota stops it (`quota_exceeded`), where the predecessor's grant alone would have let
it through."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from support.governance_support import OPERATOR, put_policy
from support.recon_client import op
from support.stack_fixtures import StackWith

LEASE_S = 4
TX = "claim-42"


def body() -> dict[str, Any]:
    return {
        "tx_id": TX,
        "agent_id": "agent-A",
        "session_id": "s-A",
        "steps": [
            {
                "action": "charge",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": {"amount": 900, "currency": "usd", "customer": "cus_claim"},
            }
        ],
    }


POLICY = {
    "version": 1,
    "agents": {
        "agent-A": {"grants": ["payments.charge"]},
        "agent-B": {
            "grants": ["payments.charge"],
            "quotas": [{"operation": "payments.charge", "window_s": 3600, "max_amount": 1}],
        },
        "agent-C": {"grants": []},
    },
    # The charge waits for a person, so that its call is made after the claim.
    "approval_required": ["write"],
}


async def _until(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := await check()):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)
    return found


async def test_a_claim_is_judged_on_the_intent_granted_and_governs_the_successor(
    stack_with: StackWith,
) -> None:
    async with stack_with(RECON_OWNER_LEASE_S=str(LEASE_S)) as (stack, recon):
        url, headers = stack.intake_url, recon.headers
        assert (await put_policy(recon.http, url, POLICY)).status_code == 200

        async def claim(agent: str, session: str) -> Any:
            return await recon.http.post(
                f"{url}/v1/transactions/{TX}/claim",
                json={"agent_id": agent, "session_id": session},
                headers=headers,
            )

        accepted = await recon.submit(body())
        assert accepted.status_code == 202, accepted.text
        owner = accepted.json()["owner"]
        assert (owner["agent_id"], owner["session_id"]) == ("agent-A", "s-A")
        # Item 16: at once, whatever the projection shows yet.
        early = await claim("agent-B", "s-B")
        assert (early.status_code, early.json()["error"]) == (409, "lease_held"), early.text
        # Item 8: an agent not granted the charge may not take it over, lease or not.
        stranger = await claim("agent-C", "s-C")
        assert (stranger.status_code, stranger.json()["error"]) == (403, "not_granted")
        # Item 5: an agent key's abort must name and prove the owning session.
        bare = await recon.http.post(f"{url}/v1/transactions/{TX}/abort", headers=headers)
        assert (bare.status_code, bare.json()["error"]) == (403, "session_required"), bare.text
        forged = await recon.http.post(
            f"{url}/v1/transactions/{TX}/abort",
            json={"agent_id": "agent-A", "session_id": "s-A", "owner_token": "ot_guess"},
            headers=headers,
        )
        assert (forged.status_code, forged.json()["error"]) == (403, "owner_token_invalid")
        await recon.wait_until(
            TX,
            lambda tx: op(tx, "charge")["state"] == "awaiting_approval",
            60,
            "the charge never waited for approval",
        )

        async def taken() -> bool:
            answer = await claim("agent-B", "s-B")
            assert answer.status_code in (200, 409), answer.text
            return bool(answer.status_code == 200)

        await _until(taken, "B could never claim", timeout=LEASE_S + 60)

        async def refusals() -> list[dict[str, Any]]:
            events = await recon.events(TX)
            return [e["data"] for e in events if e["type"] == "CommandRefused"]

        async def claimed() -> bool:
            return any(e["type"] == "TransactionClaimed" for e in await recon.events(TX))

        await _until(claimed, "the claim never reached the log")
        # Nothing of the refused requests above was recorded.
        assert await refusals() == []
        # A's client aborts as the session it submitted with (its remembered token): fenced.
        late = await recon.abort(TX, {"reason": "A is back"})
        assert (late.status_code, late.json()["error"]) == (409, "fenced"), late.text

        # The operator approves; the call is B's now, and B's quota does not allow it.
        previewed = await recon.http.post(f"{url}/v1/previews", json=body(), headers=headers)
        assert previewed.status_code == 200, previewed.text
        approved = await recon.http.post(
            f"{url}/v1/approvals",
            json={"tx_id": TX, "action": "charge", "digest": previewed.json()["digest"]},
            headers=OPERATOR,
        )
        assert approved.status_code == 201, approved.text
        await recon.wait_until(
            TX, lambda tx: tx["status"] == "manual_review", 60, "B's quota did not stop the call"
        )
        assert [r["reason"] for r in await recon.open_reviews() if r["tx_id"] == TX] == [
            "quota_exceeded"
        ]
        assert await recon.effects("payments.charge") == []
        assert [r["reason"] for r in await refusals()] == ["fenced"]
