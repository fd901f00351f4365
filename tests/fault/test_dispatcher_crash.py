"""kill -9 of the dispatcher between the provider's effect and its report."""

import asyncio
import time

from recon_client import Recon, effects_for, op, transaction

from services.stack import Stack


async def test_dispatcher_killed_after_the_effect_then_restarted(
    stack: Stack, recon: Recon
) -> None:
    # The effect is recorded and the answer held back: the dispatcher is left waiting
    # exactly in the window between the effect and its report.
    await recon.arm("payments.charge", "lose_response_after_commit")
    # No webhook: the restarted dispatcher's lookup is what must settle the charge.
    await recon.arm("payments.charge", "webhook_drop")
    assert (await recon.submit(transaction("crash-1"))).status_code == 202
    deadline = time.monotonic() + 30
    while not await recon.effects("payments.charge"):
        assert time.monotonic() < deadline, "the charge never reached the provider"
        await asyncio.sleep(0.05)
    stack.kill("dispatcher")
    stack.start("dispatcher")
    tx = await recon.wait_terminal("crash-1", timeout=90)
    assert tx["status"] == "committed"
    effects = await recon.effects()
    for action in ("reserve", "charge", "receipt"):
        assert len(effects_for(effects, op(tx, action)["op_key"])) == 1
    # The restarted dispatcher looked up before applying: it never sent the charge again.
    assert op(tx, "charge")["evidence"][-1]["source"] == "lookup"
