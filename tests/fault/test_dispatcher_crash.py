"""kill -9 of the dispatcher between the provider's effect and its report."""

from pathlib import Path
from typing import Any

from support.crash_support import start_paused_at, wait_paused
from support.recon_client import Recon, op, transaction

from services.crash_points import DISPATCHER_AFTER_PROVIDER_ANSWERED
from services.devtools.stack import Stack


async def test_dispatcher_killed_after_the_effect_then_restarted(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    # Held exactly in the window: the provider applied the reserve and answered, and the
    # dispatcher has neither reported it nor committed the dispatch's offset.
    marker = tmp_path / "paused"
    start_paused_at(stack, "dispatcher", DISPATCHER_AFTER_PROVIDER_ANSWERED, marker)
    # No webhook: only the restarted dispatcher can settle the reserve.
    await recon.arm("inventory.reserve", "webhook_drop")
    assert (await recon.submit(transaction("crash-1"))).status_code == 202
    await wait_paused(stack, "dispatcher", marker)
    stack.kill("dispatcher")
    stack.start("dispatcher")

    tx = await recon.wait_terminal("crash-1", timeout=90)
    assert tx["status"] == "committed"
    # The re-delivered dispatch looked the key up and found the effect: one apply reached
    # the provider, and what came after it were lookups, never a second apply.
    reserve = op(tx, "reserve")["op_key"]
    calls = await recon.assert_applied_once(reserve)
    after = [(c["kind"], c["outcome"]) for c in calls if c["seq"] > _applied(calls)["seq"]]
    assert ("lookup", "found") in after, calls
    assert op(tx, "reserve")["evidence"][-1]["source"] == "lookup"
    for action in ("charge", "receipt"):
        await recon.assert_applied_once(op(tx, action)["op_key"])


def _applied(calls: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in calls if c["outcome"] == "applied")
    return found
