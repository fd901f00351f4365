"""services.intake.delivery_records against a real Postgres: webhooks that record their
delivery ids at the same time share one statement, and each one's call returns only once
its own row is written (the ingress answers 2xx after it: services.intake.webhooks)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg

from services.intake.delivery_records import DeliveryRecords
from services.pg_pool import create_pool

HORIZON = timedelta(days=3)


async def test_concurrent_deliveries_share_a_statement_and_each_waits_for_its_row(
    fresh_database: str,
) -> None:
    pool = await create_pool(fresh_database, min_size=1, max_size=1)
    reader = await asyncpg.connect(fresh_database)
    statements: list[str] = []
    try:
        async with pool.acquire() as conn:  # the pool's one connection: the writer's
            conn.add_query_logger(lambda query: statements.append(query.query))
        records = DeliveryRecords(pool, HORIZON)
        at = datetime.now(UTC)
        seen_on_return: list[bool] = []
        reading = asyncio.Lock()  # one connection reads for every webhook

        async def deliver(account: str, delivery_id: str) -> None:
            await records.remember(account, delivery_id, at)
            async with reading:
                row = await reader.fetchval(
                    "SELECT count(*) FROM webhook_deliveries WHERE provider = $1"
                    " AND delivery_id = $2",
                    account,
                    delivery_id,
                )
            seen_on_return.append(row == 1)

        # 20 webhooks at once, one of them a provider's retry arriving with the first.
        ids = [("sandbox", f"evt_{n}") for n in range(18)] + [("acme/sandbox", "evt_0")]
        await asyncio.gather(*(deliver(a, d) for a, d in [*ids, ("sandbox", "evt_3")]))
        await asyncio.sleep(0)  # the query logger's callbacks run on the loop

        assert seen_on_return == [True] * 20
        rows = await reader.fetch("SELECT provider, delivery_id FROM webhook_deliveries")
        assert sorted((r["provider"], r["delivery_id"]) for r in rows) == sorted(ids)
        inserts = [s for s in statements if s.startswith("INSERT INTO webhook_deliveries")]
        # All 20 were waiting when the writer first ran: one statement, one row per id.
        assert len(inserts) == 1
    finally:
        await reader.close()
        await pool.close()
