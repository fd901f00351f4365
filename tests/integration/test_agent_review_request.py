"""`POST /v1/transactions/{tx_id}/review` (README "Agent sessions and succession"), against
the real stack: the owning session asks a person to settle its operation in flight rather
than guess, and the review opens on the log; an operation that is not in flight is
answered `409 operation_not_in_flight` with nothing produced. The route judges the
operation on the decider's own fold of the projected log (services.intake.projected)."""

from typing import Any

from support.recon_client import op
from support.stack_fixtures import StackWith

CHARGE = {"amount": 700, "currency": "usd", "customer": "cus_review"}


def body(tx_id: str) -> dict[str, Any]:
    return {
        "tx_id": tx_id,
        "agent_id": "agent-R",
        "session_id": "s-R",
        "steps": [
            {
                "action": "charge",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": CHARGE,
                "compensation": {"operation": "payments.refund"},
            }
        ],
    }


async def test_the_owner_asks_a_person_to_settle_its_unknown_and_not_a_settled_step(
    stack_with: StackWith,
) -> None:
    # The reconciler stays out of the way: only the agent asks for this review.
    async with stack_with(RECON_RECONCILE_AFTER_S="600") as (stack, recon):
        url, headers = stack.intake_url, recon.headers

        async def ask(tx_id: str) -> Any:
            return await recon.http.post(
                f"{url}/v1/transactions/{tx_id}/review",
                json={
                    "agent_id": "agent-R",
                    "session_id": "s-R",
                    "owner_token": recon.owners[tx_id]["owner_token"],
                    "action": "charge",
                    "reason": "the charge timed out",
                },
                headers=headers,
            )

        # A charge whose answer is lost and whose lookups fail stays `unknown`.
        await recon.arm("payments.charge", "lookup_unavailable", times=1000)
        await recon.arm("payments.charge", "lose_response_after_commit", times=1)
        await recon.arm("payments.charge", "webhook_drop", times=1)
        assert (await recon.submit(body("review-unknown"))).status_code == 202
        await recon.wait_until(
            "review-unknown",
            lambda tx: op(tx, "charge")["state"] == "unknown",
            60,
            "the charge never went unknown",
        )
        asked = await ask("review-unknown")
        assert asked.status_code == 202, asked.text
        assert asked.json()["status"] == "review_requested"
        reviewed = await recon.wait_until(
            "review-unknown",
            lambda tx: op(tx, "charge")["state"] == "manual_review",
            60,
            "the review never opened",
        )
        assert reviewed["status"] == "manual_review"
        [review] = [r for r in await recon.open_reviews() if r["tx_id"] == "review-unknown"]
        assert review["reason"] == "requested_by_agent: the charge timed out"

        # A committed charge is not in flight: refused, and nothing reaches the log.
        await recon.http.delete(f"{stack.sandbox_url}/v1/faults")
        assert (await recon.submit(body("review-done"))).status_code == 202
        assert (await recon.wait_terminal("review-done"))["status"] == "committed"
        before = await recon.settled_events("review-done")
        refused = await ask("review-done")
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == "operation_not_in_flight"
        assert "confirmed" in refused.json()["message"]
        assert await recon.events("review-done") == before
