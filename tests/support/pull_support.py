"""The pull reconciler's test scenario, shared by its integration and fault tests: a charge
stranded `dispatched` with nobody but the pull reconciler left to ask about it."""

import asyncio
import time
from typing import Any

from services.devtools.stack import Stack
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
