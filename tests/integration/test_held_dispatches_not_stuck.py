"""A dispatch a kill switch holds is not a stuck operation: the pull reconciler does not look
it up (its lookups would find nothing and, past the budget, send to review a leg that only
waits for the release), while every other leg in flight still is."""

from datetime import UTC, datetime, timedelta

import asyncpg

from reconcilers.store import apply_reconciler_schema, in_flight_legs
from services.governance.store import apply_governance_schema, hold


async def test_a_held_dispatch_is_not_looked_up_by_the_reconciler(fresh_database: str) -> None:
    conn = await asyncpg.connect(fresh_database)
    try:
        await apply_reconciler_schema(conn)
        await apply_governance_schema(conn)
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
        assert [leg.op_key for leg in await in_flight_legs(conn)] == ["k_stuck"]
    finally:
        await conn.close()
