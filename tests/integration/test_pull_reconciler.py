"""The pull reconciler against real processes: a dispatcher dies with an operation
`dispatched`; the scheduled lookups settle it, or hand it to a person past the budget."""

import asyncio
import time
from typing import Any

from recon_client import Recon, effects_for, op, transaction

from services.stack import Stack

BUDGET = 4
FAST_RECONCILER = {
    "RECON_RECONCILE_INTERVAL_S": "0.3",
    # Longer than the provider holds the call (below): a lookup while the call is still in
    # flight would find nothing, and the decider would rightly re-dispatch.
    "RECON_RECONCILE_AFTER_S": "3",
    "RECON_RECONCILE_BUDGET": str(BUDGET),
    "RECON_RECONCILE_BACKOFF_S": "0.3",
    "RECON_RECONCILE_BACKOFF_MAX_S": "1",
}


def restart_reconciler_fast(stack: Stack) -> None:
    stack.stop("reconciler")
    stack.extra_env.update(FAST_RECONCILER)
    stack.start("reconciler")


async def wait_op_state(recon: Recon, tx_id: str, action: str, state: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    last: Any = None
    while time.monotonic() < deadline:
        response = await recon.get(tx_id)
        if response.status_code == 200:
            last = response.json()
            if op(last, action)["state"] == state:
                return dict(last)
        await asyncio.sleep(0.05)
    raise AssertionError(f"{tx_id} {action} never {state}: {last}")


async def strand_charge(
    stack: Stack, recon: Recon, tx_id: str, *, lookups_unavailable: bool = False
) -> None:
    """The provider holds the charge call for 2 s; the dispatcher is killed meanwhile and
    not restarted, and the provider's webhook is dropped, so nobody but the pull reconciler
    will ever ask about it."""
    await recon.arm("payments.charge", "webhook_drop", times=100)
    await recon.arm("payments.charge", "delay", delay_ms=2000)
    assert (await recon.submit(transaction(tx_id, receipt=False))).status_code == 202
    await wait_op_state(recon, tx_id, "charge", "dispatched")
    stack.kill("dispatcher")
    if lookups_unavailable:
        # Only now: the sandbox refuses lookups of keys it does not know yet under any
        # lookup fault, and the reserve step before must go through untouched.
        await recon.arm("payments.charge", "lookup_unavailable", times=1000)


def reconciler_lookups(operation: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e
        for e in operation["evidence"]
        if str(e.get("observation_id", "")).startswith("reconcile:")
    ]


async def test_stuck_operations_are_settled_by_lookup_or_sent_to_review(
    stack: Stack, recon: Recon
) -> None:
    restart_reconciler_fast(stack)

    # 1. The effect lands after the dispatcher died: a lookup finds it and confirms it.
    await strand_charge(stack, recon, "pull-1")
    tx = await recon.wait_terminal("pull-1", timeout=30)
    assert tx["status"] == "committed"
    charge = op(tx, "charge")
    assert charge["state"] == "confirmed" and charge["attempts"] == 1
    found = reconciler_lookups(charge)
    assert found and found[-1]["outcome"] == "succeeded" and found[-1]["source"] == "lookup"
    assert len(effects_for(await recon.effects(), charge["op_key"])) == 1

    # 2. Lookups unavailable: the operation stays `unknown` through the budget, then goes
    # to manual review with every lookup in its evidence.
    stack.start("dispatcher")
    await strand_charge(stack, recon, "pull-2", lookups_unavailable=True)
    tx = await recon.wait_terminal("pull-2", timeout=40)
    assert tx["status"] == "manual_review"
    charge = op(tx, "charge")
    assert charge["state"] == "manual_review"
    lookups = reconciler_lookups(charge)
    assert [e["observation_id"] for e in lookups] == [
        f"reconcile:{charge['op_key']}:1:{n}" for n in range(1, BUDGET + 1)
    ]
    assert {e["outcome"] for e in lookups} == {"unavailable"}
    events = await recon.events("pull-2")
    review = [e for e in events if e["type"] == "OperationNeedsReview"]
    assert len(review) == 1 and review[0]["data"]["reason"] == "lookup_budget_exhausted"
    types = [e["type"] for e in events]
    assert "OperationUnknown" in types  # the first unavailable lookup made it `unknown`
