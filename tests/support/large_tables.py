"""Tables large enough for a sequential scan to be a real choice for the planner, for the
tests that check which plan a statement gets (tests/integration/test_webhook_lookup_plans.py,
test_unnest_plans.py): `rows` intents of three legs each with their intent keys and a begun
call per forward leg, as many projected operations and handled webhook deliveries, analysed.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg


async def fill(conn: asyncpg.Connection, rows: int) -> None:
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
        rows,
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
        INSERT INTO calls_begun (tenant, op_key, leg, attempt)
        SELECT tenant, key, leg, 1 FROM intent_keys WHERE leg = 'forward'
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
        rows,
    )
    await conn.execute(
        """
        INSERT INTO webhook_deliveries (provider, delivery_id, received_at)
        SELECT 'sandbox', 'whd-' || n, now() FROM generate_series(1, $1) n
        """,
        rows,
    )
    await conn.execute(
        "ANALYZE intents; ANALYZE intent_keys; ANALYZE calls_begun; ANALYZE operations;"
        " ANALYZE webhook_deliveries"
    )


@asynccontextmanager
async def filled(url: str, rows: int) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the database at `url`, its tables filled with `rows` (fill)."""
    conn = await asyncpg.connect(url)
    try:
        await fill(conn, rows)
        yield conn
    finally:
        await conn.close()


async def plan(conn: asyncpg.Connection, query: str, types: str, values: str, verbose: bool) -> str:
    """The plan Postgres picks for `query` prepared with parameters of `types` and executed
    with `values` (SQL literals): the generic one if the connection forces it, else the
    first custom plan. VERBOSE names the parameters wherever they are used."""
    await conn.execute(f"PREPARE planned({types}) AS {query}")
    try:
        explain = "EXPLAIN (VERBOSE)" if verbose else "EXPLAIN"
        rows = await conn.fetch(f"{explain} EXECUTE planned({values})")
    finally:
        await conn.execute("DEALLOCATE planned")
    return "\n".join(row[0] for row in rows)
