"""Upgrading a database from before `calls_begun` (issue 18, item 18): every leg the
projection shows in flight may have been sent by a dispatcher that wrote no row, so the
table is created with a row for each. Without one, such a leg (its dispatch consumed long
ago) would be taken by the reconciler for one no dispatcher has picked up yet and never
be looked up, and a redelivery of it would be sent without a lookup.

Such a database has the projection but not the governance schema: the migrate step runs
version 1 (services/migrations/0001.baseline.sql) on it, whose governance part does this."""

import asyncio

import asyncpg
from support import release_before_migrations

from services.migrate import migrate

OPERATION = (
    "INSERT INTO operations (tenant, tx_id, action, position, kind, provider, operation,"
    " op_key, state, attempts, evidence, updated_at, comp_op_key, comp_state, comp_attempts)"
    " VALUES ($1, $2, 'step', 0, 'step', 'sandbox', 'payments.charge', $3, $4, $5, '[]',"
    " now(), $6, $7, $8)"
)


def _quiet(line: str) -> None:
    return None


async def test_an_upgrade_marks_every_leg_in_flight_as_possibly_sent(empty_database: str) -> None:
    conn = await asyncpg.connect(empty_database)
    try:
        # the projection of an older version, with its legs
        await release_before_migrations.build(conn, ("projections",))
        await conn.execute(OPERATION, "demo", "t1", "k_sent", "dispatched", 2, None, None, 0)
        await conn.execute(OPERATION, "acme", "t2", "k_unknown", "unknown", 1, None, None, 0)
        await conn.execute(OPERATION, "demo", "t3", "k_done", "confirmed", 1, None, None, 0)
        await conn.execute(OPERATION, "demo", "t4", "k_new", "pending", 0, None, None, 0)
        await conn.execute(
            OPERATION, "demo", "t5", "k_fwd", "compensating", 1, "k_undo", "dispatched", 1
        )

        await asyncio.to_thread(migrate, empty_database, _quiet)
        await asyncio.to_thread(migrate, empty_database, _quiet)  # a second run adds nothing

        rows = await conn.fetch("SELECT tenant, op_key, leg, attempt FROM calls_begun")
    finally:
        await conn.close()
    assert sorted(tuple(r) for r in rows) == [
        ("acme", "k_unknown", "forward", 1),
        ("demo", "k_sent", "forward", 2),
        ("demo", "k_undo", "compensation", 1),
    ]


async def test_a_fresh_database_starts_with_no_call_begun(fresh_database: str) -> None:
    conn = await asyncpg.connect(fresh_database)
    try:
        assert await conn.fetchval("SELECT count(*) FROM calls_begun") == 0
    finally:
        await conn.close()
