"""The pull reconciler against real processes: a provider call answers `unknown` and the
decider's own lookups find the provider unavailable; the scheduled lookups settle it, or hand
it to a person past the budget."""

from typing import Any

from support.pull_support import BUDGET, restart_reconciler_fast, strand_charge
from support.recon_client import Recon, effects_for, op

from services.devtools.stack import Stack


def reconciler_lookups(operation: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e
        for e in operation["evidence"]
        if str(e.get("observation_id", "")).startswith("reconcile:")
    ]


async def test_stuck_operations_are_settled_by_lookup_or_sent_to_review(
    stack: Stack, recon: Recon
) -> None:
    stack.stop("reconciler")

    # 1. The effect lands after the decider's lookups gave up: a lookup finds it and
    # confirms it.
    await strand_charge(stack, recon, "pull-1")
    restart_reconciler_fast(stack)
    tx = await recon.wait_terminal("pull-1", timeout=30)
    assert tx["status"] == "committed"
    charge = op(tx, "charge")
    assert charge["state"] == "confirmed" and charge["attempts"] == 1
    found = reconciler_lookups(charge)
    assert found and found[-1]["outcome"] == "succeeded" and found[-1]["source"] == "lookup"
    assert len(effects_for(await recon.effects(), charge["op_key"])) == 1

    # 2. Lookups unavailable: the operation stays `unknown` through the budget, then goes
    # to manual review with every lookup in its evidence.
    stack.stop("reconciler")
    await strand_charge(stack, recon, "pull-2", lookups_unavailable=True)
    stack.start("reconciler")
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
    # The reconciler's unavailable lookups are evidence, not an answer: only the call's own
    # `unknown` (the decider's timeout) made the leg unknown, once.
    assert types.count("OperationUnknown") == 1
