"""A governance change whose holder stops without closing its connection (services.intake.
policy.changing, CHANGE_IDLE_BOUND_S). A change is written in a transaction that stays open
while Kafka acknowledges its record; a killed intake's socket is closed by its kernel and
Postgres rolls the change back at once, but a host lost, a network cut or a frozen process
leaves the transaction idle and what it wrote locked until the kernel's keepalive gives up
on the peer (about two hours). Meanwhile another install of the tenant's policy, another
release of the switch, or a dispatcher's reservation of a tripped breaker's agent and
operation (and with it, through its advisory lock, every reservation of that pair) waits.
Postgres ends the holder's session once its change sat idle past the bound: the change
rolls back, as after a crash before the commit, and the waiter goes on. Real Postgres; the
holder's stop is a connection that sends nothing more, which is all Postgres can see of one.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from support.holder_stopped import Stop, connections, holder_stopped

from events.policy import PolicyDocument, Quota
from services.governance import store
from services.intake.policy import changing

BOUND_S = 1.0
TENANT, AGENT, OPERATION = "acme", "agent-7", "payments.charge"
QUOTA = Quota(operation=OPERATION, window_s=60, max_count=0)  # every dispatch trips it


@pytest.fixture
async def conns(fresh_database: str) -> AsyncIterator[list[asyncpg.Connection]]:
    async with connections(fresh_database, 2) as opened:
        yield opened


def stopped_in_change(
    conn: asyncpg.Connection, change: Callable[[asyncpg.Connection], Awaitable[Any]]
) -> contextlib.AbstractAsyncContextManager[None]:
    """`change` written on `conn` in a change's transaction (services.intake.policy.changing)
    whose holder then stops, its record never acknowledged: the block runs meanwhile."""

    async def holder(stop: Stop) -> None:
        async with changing(conn, idle_bound_s=BOUND_S):
            assert await change(conn)
            await stop()

    return holder_stopped(holder)


async def waited_for(step: Awaitable[Any]) -> tuple[Any, float]:
    """What `step` answered and how long it waited (at most ten bounds)."""
    started = time.monotonic()
    async with asyncio.timeout(10 * BOUND_S):
        answer = await step
    return answer, time.monotonic() - started


async def reserve(conn: asyncpg.Connection, op_key: str) -> Quota | None:
    return await store.reserve_quota(
        conn,
        tenant=TENANT,
        agent_id=AGENT,
        operation=OPERATION,
        op_key=op_key,
        amount=1,
        quotas=(QUOTA,),
    )


async def test_a_breaker_reset_whose_holder_stopped_lets_the_dispatchers_go_within_its_bound(
    conns: list[asyncpg.Connection],
) -> None:
    stopped, dispatcher = conns
    assert await reserve(dispatcher, "op-1") == QUOTA  # the breaker trips
    resetting = stopped_in_change(
        stopped, lambda c: store.reset_breaker(c, TENANT, AGENT, OPERATION)
    )
    async with resetting:
        # The reservation finds the breaker tripped (the reset is not committed) and waits
        # at its row, holding the pair's advisory lock, until the reset's transaction ends.
        refused, waited = await waited_for(reserve(dispatcher, "op-2"))
    assert waited < 5 * BOUND_S
    # The reset rolled back, as after a crash before its commit: the breaker still trips.
    assert refused == QUOTA
    # Counted by the trip and by this refusal.
    assert await dispatcher.fetchval("SELECT refused FROM quota_breakers") == 2


async def test_a_policy_install_whose_holder_stopped_lets_the_next_install_in_within_its_bound(
    conns: list[asyncpg.Connection],
) -> None:
    stopped, other = conns

    def version(n: int, grant: str) -> PolicyDocument:
        return PolicyDocument.model_validate({"version": n, "agents": {AGENT: {"grants": [grant]}}})

    assert await store.replace_policy(other, TENANT, version(1, OPERATION), "ops")
    mine, theirs = version(2, OPERATION), version(2, "payments.refund")
    async with stopped_in_change(stopped, lambda c: store.replace_policy(c, TENANT, mine, "a")):

        async def install() -> bool:
            async with changing(other):
                return await store.replace_policy(other, TENANT, theirs, "b")

        installed, waited = await waited_for(install())
    assert waited < 5 * BOUND_S
    assert installed  # the stopped install rolled back: version 2 is the waiter's
    in_force = await store.policy_of(other, TENANT)
    assert in_force is not None and in_force.document == theirs
    # The bound was the change's transaction's only: the connection is as it was.
    assert await other.fetchval("SHOW idle_in_transaction_session_timeout") == "0"


async def test_a_switch_release_whose_holder_stopped_lets_the_next_release_in_within_its_bound(
    conns: list[asyncpg.Connection],
) -> None:
    stopped, other = conns
    await store.engage(other, "ks_held", TENANT, {}, "test", "ops")
    async with stopped_in_change(stopped, lambda c: store.release(c, TENANT, "ks_held", "a")):

        async def release() -> str | None:
            async with changing(other):
                return await store.release(other, TENANT, "ks_held", "b")

        released, waited = await waited_for(release())
    assert waited < 5 * BOUND_S
    assert released is not None  # the stopped release rolled back: this one released it
    assert await other.fetchval("SELECT released_by FROM kill_switches") == "b"
