"""The pull reconciler's test scenario, shared by its integration and fault tests: a charge
stranded `unknown` with nobody but the pull reconciler left to ask about it."""

import asyncio
import time
from typing import Any

from services.devtools.stack import Stack
from services.dispatcher.call_plan import LOOKUP_BACKOFF_S
from support.recon_client import Recon, op, transaction

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
    if "reconciler" in stack.processes:
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


async def wait_calls_arrived(recon: Recon, operation: str, mode: str = "delay") -> None:
    """Until the provider has taken every armed `mode` fault of `operation`: a call consumes
    one when it arrives, so the calls it holds have reached the provider. A dispatcher
    killed only then leaves each of them begun (services/dispatcher/calls_begun.py), which
    is what lets the reconciler look them up; a dispatch no dispatcher began waits for one
    instead (issue 18, item 18)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        response = await recon.http.get(f"{recon.sandbox_url}/v1/faults")
        response.raise_for_status()
        armed = response.json()["faults"]
        if not any(f["operation"] == operation and f["mode"] == mode for f in armed):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the {operation} calls held by {mode!r} never reached the provider")


async def strand_charge(
    stack: Stack, recon: Recon, tx_id: str, *, lookups_unavailable: bool = False
) -> None:
    """The provider holds the charge call past the decider's 2 s provider timeout (its
    answer: `unknown`), drops the webhook and answers the decider's own lookups after the
    timeout `unavailable`, so the leg stays `unknown` with nobody but the pull reconciler
    left to ask about it (the decider, which makes the calls, never dies here: a decider that
    takes a partition looks its unanswered calls up itself). The reconciler must not run
    meanwhile: its lookups would take the decider's unavailable answers. With
    `lookups_unavailable` every later lookup is unavailable too."""
    assert "reconciler" not in stack.processes, "stop the reconciler before stranding"
    await recon.arm("payments.charge", "webhook_drop", times=100)
    await recon.arm("payments.charge", "delay", delay_ms=2500)
    assert (await recon.submit(transaction(tx_id, receipt=False))).status_code == 202
    await wait_calls_arrived(recon, "payments.charge")
    # Only now: the sandbox refuses lookups of keys it does not know yet under any lookup
    # fault, and the reserve step before must go through untouched.
    times = 1000 if lookups_unavailable else len(LOOKUP_BACKOFF_S)
    await recon.arm("payments.charge", "lookup_unavailable", times=times)
    # The decider's lookups after its timeout are done once it reported them (unavailable).
    deadline = time.monotonic() + 30
    while True:
        charge = op((await recon.get(tx_id)).json(), "charge")
        if any(e.get("outcome") == "unavailable" for e in charge["evidence"]):
            break
        assert time.monotonic() < deadline, charge
        await asyncio.sleep(0.1)
    assert charge["state"] == "unknown", charge
