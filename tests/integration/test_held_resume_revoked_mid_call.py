"""A resumed hold whose partition is revoked while its call is on the wire is left to the
partition's new owner when the call ends (its claim released, the row kept), not forgotten:
the new owner's take-over left the held leg to this resume (take_over.not_held), and the
resume's answers, gone to recon.observations, may not settle the leg (found by the
simulator, seed 20156: an unknown answer, then a lookup's `absent`, of a lookup-first
attempt never begun; forgotten, nobody called it again and the transaction never
finished). The new owner claims it at its next look and judges it by its own state.

Real parts: Postgres, Kafka (the answer goes to recon.observations) and the sandbox provider
as a subprocess, through the production DispatchHost resume, executor and gate."""

import asyncio

import asyncpg
import httpx
from support.held_order import claim_held, hold_order
from support.sandbox_process import Sandbox
from test_call_lease_revocation import _Process, processes, provider  # noqa: F401
from test_calls_begun import charge

from services.dispatcher.dispatch_order import DispatchOrder
from services.governance import store


async def test_a_hold_revoked_during_its_resumed_call_is_left_to_the_new_owner(
    processes: tuple[_Process, _Process],  # noqa: F811
    provider: Sandbox,  # noqa: F811
    fresh_database: str,
) -> None:
    old, _ = processes
    envelope, dispatch = charge("held-mid-call", "k_held_mid_call")
    order = DispatchOrder(envelope, dispatch, 0)
    conn = await asyncpg.connect(fresh_database)
    try:
        await hold_order(conn, order)
        # The owner's gate loop claims the released hold, as it does while it owns 0.
        claimed = await claim_held(conn, old.host.gate.claimer)
        # The provider answers 1.5 s late: the rebalance comes while the call is on the wire.
        async with httpx.AsyncClient() as client:
            faults = await client.post(
                f"{provider.url}/v1/faults",
                json={"operation": "payments.charge", "mode": "delay", "delay_ms": 1500},
            )
        assert faults.status_code < 300, faults.text
        resume = asyncio.create_task(old.host._resume([claimed]))
        async with asyncio.timeout(10):
            while not await conn.fetchval(
                "SELECT count(*) FROM calls_begun WHERE op_key = $1", dispatch.op_key
            ):
                await asyncio.sleep(0.01)
        old.owned.discard(0)
        async with asyncio.timeout(15):
            await resume

        # The new owner's gate loop, at its next look: the hold is there, free to claim.
        by_new_owner = await store.claim_released(conn, 60.0, claimer="new", partitions=[0])
        assert [h.op_key for h in by_new_owner] == [dispatch.op_key], (
            "the resume forgot a hold whose partition it lost during the call"
        )
    finally:
        await conn.close()
