"""A released hold whose partition is revoked between its claim and its call is not called
by the claimer (only the partition's owner knows whether its transaction still waits on the
held leg: services.governance.store.claim_released), and its claim is released at once, so
the new owner's gate loop claims it at its next look instead of after the claim's lease
(HOLD_LEASE_S, 60 s): a rebalance must not hold a released dispatch back for a minute.
Real Postgres, the real DispatchHost resume and the real statements."""

import asyncio

import asyncpg
from support.held_order import hold_order
from support.txbuilders import submit

from events.topics import Topics
from services.config import Settings
from services.decider.dispatch_host import DispatchHost
from services.decider.take_over import take_over_orders
from services.dispatcher import gatekeeper
from services.dispatcher.dispatch_order import DispatchOrder
from services.governance import store
from transactions.transaction import handle, initial_state

TENANT = "demo"


def _charge_order(partition: int) -> DispatchOrder:
    state, _ = handle(initial_state(TENANT, "held-revoked"), submit(["charge"]))
    (order,) = take_over_orders([state], partition)
    return order


async def test_a_hold_revoked_between_its_claim_and_its_call_is_claimable_by_the_new_owner_at_once(
    fresh_database: str,
) -> None:
    # No Kafka: the host's producer is never started, and a resume left to the owner sends
    # nothing.
    settings = Settings(
        kafka_bootstrap="localhost:9",
        database_url=fresh_database,
        topics=Topics("held-claim-revoked."),
        environment="test",
    )
    owned = {0}
    old_owner = DispatchHost(settings, lambda: owned, lambda answer: None, lambda *key: None)
    order = _charge_order(partition=0)
    conn = await asyncpg.connect(fresh_database)
    try:
        await hold_order(conn, order)
        # The old owner's gate loop claims the released hold, as it does while it owns 0.
        (claimed,) = await store.claim_released(
            conn,
            gatekeeper.HOLD_LEASE_S,
            gatekeeper.RESUME_BATCH,
            claimer=old_owner.gate.claimer,
            partitions=[0],
        )
        # Its own call of the attempt is still running (a take-over called the leg before
        # another process's call of it was held): the resume waits for it, claim kept.
        old_owner.running.add(order.leg_key)
        resume = asyncio.create_task(old_owner._resume([claimed]))
        await asyncio.sleep(0.3)
        assert not resume.done()
        assert await store.claim_released(conn, 60.0, claimer="new", partitions=[0]) == []
        owned.clear()  # the rebalance revokes partition 0
        async with asyncio.timeout(5):
            await resume
        # The new owner's gate loop, at its next look.
        by_new_owner = await store.claim_released(conn, 60.0, claimer="new", partitions=[0])
        assert [h.op_key for h in by_new_owner] == [order.dispatch.op_key], (
            "the new owner waits for the old claim to lapse"
        )
        # The old claimer's renewal and forget touch the new owner's claim no more.
        await store.renew_claims(conn, [claimed], 60.0)
        await store.forget_held(conn, claimed)
        assert (
            await conn.fetchval(
                "SELECT claimed_by FROM held_dispatches WHERE op_key = $1", order.dispatch.op_key
            )
            == "new"
        )
    finally:
        await conn.close()
        await old_owner.gate.close()
