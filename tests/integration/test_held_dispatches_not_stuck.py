"""A dispatch a kill switch holds is not a stuck operation: the pull reconciler does not look
it up (its lookups would find nothing and, past the budget, send to review a leg that only
waits for the release), while every other leg in flight still is (the test inserts the
`calls_begun` row a dispatcher writes before its call: a leg without one was never sent)."""

from datetime import UTC, datetime, timedelta

import asyncpg

from reconcilers.store import in_flight_legs
from services.governance.store import hold


async def test_a_held_dispatch_is_not_looked_up_by_the_reconciler(fresh_database: str) -> None:
    conn = await asyncpg.connect(fresh_database)
    try:
        long_ago = datetime.now(UTC) - timedelta(hours=1)
        for tx_id, key in (("tx-held", "k_held"), ("tx-stuck", "k_stuck")):
            await conn.execute(
                "INSERT INTO operations (tenant, tx_id, action, position, kind, provider,"
                " operation, op_key, state, attempts, evidence, updated_at)"
                " VALUES ('demo', $1, 'charge', 0, 'step', 'sandbox', 'payments.charge', $2,"
                " 'dispatched', 1, '[]', $3)",
                tx_id,
                key,
                long_ago,
            )
        await hold(
            conn,
            tenant="demo",
            tx_id="tx-held",
            action="charge",
            op_key="k_held",
            attempt=1,
            agent_id="agent-7",
            provider="sandbox",
            operation="payments.charge",
            partition=0,
            envelope="{}",
            switch_ids=("ks_1",),
        )
        # A dispatcher began k_stuck's call (and nobody has heard back); k_held it never began.
        await conn.execute(
            "INSERT INTO calls_begun (tenant, op_key, leg, attempt)"
            " VALUES ('demo', 'k_stuck', 'forward', 1)"
        )
        assert [leg.op_key for leg in await in_flight_legs(conn)] == ["k_stuck"]
    finally:
        await conn.close()


async def test_a_dispatch_no_dispatcher_began_is_not_looked_up_nor_sent_to_review(
    fresh_database: str,
) -> None:
    """Issue 18, item 18: a leg still `dispatched` whose call no dispatcher began (it was
    produced during a rejoin, or waits in a backlog) is not stuck at a provider: past the
    lookup budget it would go to review unsent. Once begun, or once a dispatcher reported
    it `unknown`, it is looked up as before."""
    conn = await asyncpg.connect(fresh_database)
    try:
        long_ago = datetime.now(UTC) - timedelta(hours=1)
        for tx_id, key, state in (
            ("tx-waiting", "k_waiting", "dispatched"),
            ("tx-begun", "k_begun", "dispatched"),
            ("tx-unknown", "k_unknown", "unknown"),
        ):
            await conn.execute(
                "INSERT INTO operations (tenant, tx_id, action, position, kind, provider,"
                " operation, op_key, state, attempts, evidence, updated_at)"
                " VALUES ('demo', $1, 'charge', 0, 'step', 'sandbox', 'payments.charge', $2,"
                " $3, 1, '[]', $4)",
                tx_id,
                key,
                state,
                long_ago,
            )
        await conn.execute(
            "INSERT INTO calls_begun (tenant, op_key, leg, attempt)"
            " VALUES ('demo', 'k_begun', 'forward', 1)"
        )
        legs = sorted(leg.op_key for leg in await in_flight_legs(conn))
        assert legs == ["k_begun", "k_unknown"]
    finally:
        await conn.close()
