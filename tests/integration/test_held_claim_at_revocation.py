"""A released hold whose partition is revoked between its claim and its call is not called
by the claimer (only the partition's owner knows whether its transaction still waits on the
held leg: services.governance.store.claim_released), and its claim is released at once, so
the new owner's gate loop claims it at its next look instead of after the claim's lease
(HOLD_LEASE_S, 60 s): a rebalance must not hold a released dispatch back for a minute.
Real Postgres, the real DispatchHost resume and the real statements. Likewise a resumed
hold whose plan fails while its partition is still owned: its claim is released after the
back-off, so the owner's own loop claims it again at its next look, not after 60 s."""

import asyncio
from collections.abc import Callable

import asyncpg
from support.held_order import claim_held, hold_order
from support.txbuilders import submit

from events.topics import Topics
from services.at_least_once import RetryBatch
from services.config import Settings
from services.decider.dispatch_host import DispatchHost
from services.decider.take_over import take_over_orders
from services.dispatcher import gatekeeper
from services.dispatcher.dispatch_order import DispatchOrder
from services.governance import store
from transactions.transaction import handle, initial_state

TENANT = "demo"


def _settings(database_url: str) -> Settings:
    # No Kafka: the host's producer is never started, and a resume left to the owner sends
    # nothing.
    return Settings(
        kafka_bootstrap="localhost:9",
        database_url=database_url,
        topics=Topics("held-claim-revoked."),
        environment="test",
    )


async def _close(host: DispatchHost) -> None:
    """The host's gate, and its producer: never started, but made, and one left unclosed
    is reported when it is collected (aiokafka's ResourceWarning, "Unclosed
    AIOKafkaProducer"), a line in the run's output that hides a real leak among it."""
    await host.gate.close()
    await host.producer.stop()


def _charge_order(partition: int) -> DispatchOrder:
    state, _ = handle(initial_state(TENANT, "held-revoked"), submit(["charge"]))
    (order,) = take_over_orders([state], partition)
    return order


async def test_a_hold_revoked_between_its_claim_and_its_call_is_claimable_by_the_new_owner_at_once(
    fresh_database: str,
) -> None:
    owned = {0}
    old_owner = DispatchHost(
        _settings(fresh_database), lambda: owned, lambda answer: None, lambda *key: None
    )
    order = _charge_order(partition=0)
    conn = await asyncpg.connect(fresh_database)
    try:
        await hold_order(conn, order)
        # The old owner's gate loop claims the released hold, as it does while it owns 0.
        claimed = await claim_held(conn, old_owner.gate.claimer)
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
        await _close(old_owner)


class _FailingPlan:
    """The executor of a plan whose I/O fails (Postgres away for a moment: RetryBatch)."""

    def __init__(self) -> None:
        self.runs = 0

    async def run(
        self, order: DispatchOrder, mine: Callable[[], bool], awaited: Callable[[], bool]
    ) -> bool:
        self.runs += 1
        raise RetryBatch("Postgres away")


async def test_a_resumed_hold_whose_plan_fails_is_claimable_again_by_its_owner_at_once(
    fresh_database: str,
) -> None:
    owner = DispatchHost(
        _settings(fresh_database), lambda: {0}, lambda answer: None, lambda *key: None
    )
    executor = _FailingPlan()
    owner.executor = executor  # type: ignore[assignment]
    order = _charge_order(partition=0)
    conn = await asyncpg.connect(fresh_database)
    try:
        await hold_order(conn, order)
        claimed = await claim_held(conn, owner.gate.claimer)
        async with asyncio.timeout(5):  # the failure's back-off, 0.5 s
            await owner._resume([claimed])
        assert executor.runs == 1
        # The owner's gate loop, at its next look: the hold is there, claimable.
        again = await store.claim_released(
            conn, gatekeeper.HOLD_LEASE_S, claimer=owner.gate.claimer, partitions=[0]
        )
        assert [h.op_key for h in again] == [order.dispatch.op_key], (
            "its claim left to lapse: the owner resumes it 60 s later"
        )
    finally:
        await conn.close()
        await _close(owner)
