"""Tables large enough for a sequential scan to be a real choice for the planner, for the
tests that check which plan a statement gets (tests/integration/test_webhook_lookup_plans.py,
test_unnest_plans.py): `rows` intents of three legs each with their intent keys and a begun
call per forward leg, as many projected operations and handled webhook deliveries, analysed.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

TABLES = ("intents", "intent_keys", "calls_begun", "operations", "webhook_deliveries")


async def fill(conn: asyncpg.Connection, rows: int, analyze: bool = True) -> None:
    """`rows` of each (the module's docstring), analysed unless `analyze` is false."""
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
    if not analyze:
        return
    await conn.execute("; ".join(f"ANALYZE {table}" for table in TABLES))


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


async def plan_kept(
    url: str, made_on: int, rows: int, query: str, types: str, values: str, settings: dict[str, str]
) -> tuple[str, str]:
    """The generic plan `query` gets on the young tables of the fresh database at `url`,
    under the session `settings` (a pool's server settings), and that same plan executed
    (EXPLAIN ANALYZE, BUFFERS) once the tables hold `rows` (fill). Young: empty and never
    analysed if `made_on` is 0 (as migrated), else `made_on` rows analysed (as autovacuum
    first analyses a table, after 50 rows). Postgres keeps a prepared statement's generic
    plan until an ANALYZE of one of its tables, so a connection opened on a young database
    runs the plan it made there while the tables grow; neither the fill nor autovacuum (off
    on them here) analyses them meanwhile."""
    conn = await asyncpg.connect(url)
    try:
        for table in TABLES:
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        if made_on:
            await fill(conn, made_on)
        for name, value in settings.items():
            await conn.execute(f"SET {name} = '{value}'")
        await conn.execute(f"PREPARE planned({types}) AS {query}")
        young = await conn.fetch(f"EXPLAIN EXECUTE planned({values})")
        await conn.execute("; ".join(f"DELETE FROM {table}" for table in TABLES))
        await fill(conn, rows, analyze=False)
        grown = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE planned({values})")
    finally:
        await conn.close()
    return "\n".join(row[0] for row in young), "\n".join(row[0] for row in grown)
