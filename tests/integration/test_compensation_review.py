"""An undo that cannot be proven ends in manual review with its whole trail; a person's
`applied` lets the compensation finish."""

import httpx
from support.compensation_support import compensation_op_key, failing_third_step, wait_for
from support.recon_client import Recon, effects_for, op

from services.devtools.stack import Stack

FAST_RECONCILER = {
    "RECON_RECONCILE_INTERVAL_S": "0.3",
    "RECON_RECONCILE_AFTER_S": "3",
    "RECON_RECONCILE_BUDGET": "3",
    "RECON_RECONCILE_BACKOFF_S": "0.3",
    "RECON_RECONCILE_BACKOFF_MAX_S": "1",
}


async def test_unprovable_refund_goes_to_review_and_applied_completes_it(
    stack: Stack, recon: Recon
) -> None:
    stack.stop("reconciler")
    stack.extra_env.update(FAST_RECONCILER)
    stack.start("reconciler")
    # The refund happens at the provider, but nothing can prove it: its answer is lost,
    # its lookups fail and its webhook never comes.
    await recon.arm("payments.refund", "lose_response_after_commit")
    await recon.arm("payments.refund", "lookup_unavailable", times=1000)
    await recon.arm("payments.refund", "webhook_drop")
    assert (await recon.submit(failing_third_step("undo-review-1"))).status_code == 202

    tx = await wait_for(
        recon, "undo-review-1", lambda t: t["status"] == "manual_review", timeout=60
    )
    charge = op(tx, "charge")
    assert charge["state"] == "manual_review"
    assert op(tx, "reserve")["state"] == "confirmed"  # the next undo waits for this one

    async with httpx.AsyncClient(base_url=recon.intake_url, headers=recon.headers) as http:
        reviews = (await http.get("/v1/reviews", params={"state": "open"})).json()["reviews"]
        (review,) = [r for r in reviews if r["tx_id"] == "undo-review-1"]
        assert review["action"] == "charge" and review["reason"] == "lookup_budget_exhausted"
        detail = (await http.get(f"/v1/reviews/{review['id']}")).json()
        trail = [(e["source"], e["outcome"]) for e in detail["evidence"]]
        # the charge's own response, the refund's unknown answer, then the failed lookups
        assert ("response", "succeeded") in trail
        assert ("response", "unknown") in trail
        assert trail.count(("lookup", "unavailable")) >= 3
        resolved = await http.post(
            f"/v1/reviews/{review['id']}/resolve",
            json={
                "resolution": "applied",
                "actor": "ops@example.com",
                "note": "refund re_123 seen in the provider dashboard",
            },
            headers={"Authorization": "Bearer ops-key"},
        )
        assert resolved.status_code == 200

    tx = await wait_for(recon, "undo-review-1", lambda t: t["status"] == "compensated", timeout=60)
    assert op(tx, "charge")["state"] == "compensated"
    assert op(tx, "reserve")["state"] == "compensated"
    effects = await recon.effects()
    assert len(effects_for(effects, compensation_op_key(tx, "charge"))) == 1
    assert len(effects_for(effects, compensation_op_key(tx, "reserve"))) == 1
    assert effects_for(effects, op(tx, "receipt")["op_key"]) == []
    # `applied` settled the refund without sending it again.
    for action in ("charge", "reserve"):
        await recon.assert_applied_once(compensation_op_key(tx, action))
