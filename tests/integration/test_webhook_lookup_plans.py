"""The webhook ingress finds the operation an effect belongs to through an index whatever
plan Postgres picks (issue 7, item 17). asyncpg prepares its statements, and after a few
executions Postgres may switch a prepared statement to a generic plan, costed without the
parameter's value: a lookup that was fast with a custom plan then scans a whole table on
every webhook for an effect recon does not know. The plans are checked with the generic
plan forced, on tables large enough for a scan to be a real choice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from services.intake.webhook_store import INTENT_BY_KEY, OPERATION_BY_KEY, operation_by_key

ROWS = 3000


@pytest.fixture
async def conn(fresh_database: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(fresh_database)
    try:
        # projected operations of as many transactions.
        await conn.execute(
            """
            INSERT INTO intents (tenant, tx_id, fingerprint, agent_id, operations, produced)
            SELECT 'acme', 'tx-' || n, 'f', 'agent', jsonb_build_array(
                jsonb_build_object('action', 'reserve', 'provider', 'sandbox',
                                   'op_key', 'rk1_r' || n,
                                   'compensation_key', 'rc1_r' || n),
                jsonb_build_object('action', 'charge', 'provider', 'sandbox',
                                   'op_key', 'rk1_c' || n,
                                   'compensation_key', 'rc1_c' || n),
                jsonb_build_object('action', 'receipt', 'provider', 'sandbox',
                                   'op_key', 'rk1_e' || n,
                                   'compensation_key', null)), true
            FROM generate_series(1, $1) n
            """,
            ROWS,
        )
        await conn.execute(
            """
            INSERT INTO intent_keys (key, tenant, tx_id, action, leg)
            SELECT k.key, i.tenant, i.tx_id, op->>'action', k.leg
            FROM intents i, jsonb_array_elements(i.operations) op,
                 LATERAL (VALUES (op->>'op_key', 'forward'),
                                 (op->>'compensation_key', 'compensation')) AS k(key, leg)
            WHERE k.key IS NOT NULL
            """
        )
        await conn.execute(
            """
            INSERT INTO operations (tenant, tx_id, action, position, kind, provider, operation,
                                    op_key, state, attempts, evidence, updated_at, comp_op_key)
            SELECT 'acme', 'p-' || n, 'charge', 0, 'step', 'sandbox', 'payments.charge',
                   'rk1_p' || n, 'confirmed', 1, '[]', now(), 'rc1_p' || n
            FROM generate_series(1, $1) n
            """,
            ROWS,
        )
        await conn.execute("ANALYZE intents; ANALYZE intent_keys; ANALYZE operations")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        yield conn
    finally:
        await conn.close()


async def generic_plan(conn: asyncpg.Connection, query: str) -> str:
    await conn.execute(f"PREPARE lookup(text[], text) AS {query}")
    try:
        rows = await conn.fetch("EXPLAIN EXECUTE lookup(ARRAY['rk1_unknown'], 'sandbox')")
    finally:
        await conn.execute("DEALLOCATE lookup")
    return "\n".join(row[0] for row in rows)


@pytest.mark.parametrize("query", [OPERATION_BY_KEY, INTENT_BY_KEY], ids=["operations", "intents"])
async def test_an_unknown_effect_is_looked_up_through_an_index_under_a_generic_plan(
    conn: asyncpg.Connection, query: str
) -> None:
    plan = await generic_plan(conn, query)

    assert "$1" in plan, plan  # the generic plan: the parameter is not folded in
    assert "Seq Scan" not in plan, plan
    assert "Index" in plan, plan


async def test_the_indexed_lookup_finds_intents_by_either_key(conn: asyncpg.Connection) -> None:
    # Under the forced generic plan, as asyncpg's prepared statements may run.
    forward = await operation_by_key(conn, "sandbox", ("rk1_c17",))
    compensation = await operation_by_key(conn, "sandbox", ("nobody", "rc1_r42"))
    projected = await operation_by_key(conn, "sandbox", ("rc1_p7",))

    assert forward is not None and (forward.tx_id, forward.action, forward.op_key) == (
        "tx-17",
        "charge",
        "rk1_c17",
    )
    assert compensation is not None and (
        compensation.tx_id,
        compensation.action,
        compensation.op_key,
    ) == (
        "tx-42",
        "reserve",
        "rc1_r42",
    )
    assert projected is not None and (projected.tx_id, projected.op_key) == ("p-7", "rc1_p7")
    assert await operation_by_key(conn, "sandbox", ("rk1_unknown",)) is None
    # A key is recon's at the provider it was sent to only.
    assert await operation_by_key(conn, "stripe", ("rk1_c17",)) is None
    assert await operation_by_key(conn, "stripe", ("rc1_p7",)) is None
