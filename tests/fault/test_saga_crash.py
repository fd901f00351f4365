"""kill -9 of the saga orchestrator in the middle of a compensation."""

from compensation_support import failing_third_step, undo_key, wait_for
from recon_client import Recon, effects_for, op

from services.stack import Stack


async def test_saga_killed_mid_compensation_resumes_and_undoes_nothing_twice(
    stack: Stack, recon: Recon
) -> None:
    # The refund (the plan's first undo) is held at the provider while the saga dies.
    await recon.arm("payments.refund", "delay", delay_ms=1500)
    assert (await recon.submit(failing_third_step("saga-crash-1"))).status_code == 202
    await wait_for(recon, "saga-crash-1", lambda tx: op(tx, "charge")["state"] == "compensating")
    stack.kill("saga")
    # The refund completes without the saga; the next undo waits for it: nobody else asks.
    tx = await wait_for(
        recon, "saga-crash-1", lambda tx: op(tx, "charge")["state"] == "compensated"
    )
    assert op(tx, "reserve")["state"] == "confirmed"
    assert effects_for(await recon.effects(), undo_key(tx, "reserve")) == []

    stack.start("saga")
    tx = await recon.wait_terminal("saga-crash-1", timeout=90)
    assert tx["status"] == "compensated", tx
    effects = await recon.effects()
    assert len(effects_for(effects, undo_key(tx, "charge"))) == 1
    assert len(effects_for(effects, undo_key(tx, "reserve"))) == 1
    events = await recon.events("saga-crash-1")
    undos = [
        e["data"]["action"]
        for e in events
        if e["type"] == "OperationDispatched" and e["data"]["leg"] == "compensation"
    ]
    assert undos == ["charge", "reserve"]
    assert [e["type"] for e in events].count("CompensationPlanned") == 1
