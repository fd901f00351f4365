"""The webhook ingress finds the operation an effect belongs to through an index whatever
plan Postgres picks (issue 7, item 17). asyncpg prepares its statements, and after a few
executions Postgres may switch a prepared statement to a generic plan, costed without the
parameter's value: a lookup that was fast with a custom plan then scans a whole table on
every webhook for an effect recon does not know. The plans are checked with the generic
plan forced, on tables large enough for a scan to be a real choice: the lookup alone
(MATCH) and the one statement a delivery costs (DELIVERIES: the dedupe check with it and
the records of the deliveries answered before, issue 24 item 5, for every delivery checked
at the same time).

The intake runs DELIVERIES on a connection that plans it generically once
(services.intake.delivery_batches.open_check_pool) and keeps that plan until an ANALYZE of
one of its tables, so the plan it makes on a young database's tables (empty, or first
analysed at a few dozen rows) is checked too, run on the tables once grown: on such small
tables a Seq Scan of operations and intents under a Hash Join cost least, which that
connection's settings (services.pg_pool.GENERIC_PLANS) rule out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from support import large_tables

from services.intake.webhook_store import DELIVERIES, MATCH, Asked, look_up_all, operation_by_key
from services.pg_pool import GENERIC_PLANS

ROWS = 3000


@pytest.fixture
async def conn(fresh_database: str) -> AsyncIterator[asyncpg.Connection]:
    async with large_tables.filled(fresh_database, ROWS) as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        yield conn


# Each statement's parameter types and the values of an unknown effect's delivery.
PARAMETERS = {
    "match": ("text[], text", "ARRAY['rk1_unknown'], 'sandbox'"),
    "deliveries": (
        "text[], text[], timestamptz[], text[], int[], text[], text[], text[], timestamptz[]",
        "ARRAY['sandbox', 'sandbox'], ARRAY['whd-unknown', 'whd-other'],"
        " ARRAY[now() - interval '1 day', now() - interval '1 day'], ARRAY['sandbox', 'sandbox'],"
        " ARRAY[1, 2, 2], ARRAY['rk1_unknown', 'nobody', 'rk1_unknown'],"
        " ARRAY['sandbox'], ARRAY['whd-answered'], ARRAY[now()]",
    ),
}


async def generic_plan(conn: asyncpg.Connection, query: str, name: str) -> str:
    types, values = PARAMETERS[name]
    # VERBOSE names the parameters wherever they are used (unnest's too).
    return await large_tables.plan(conn, query, types, values, verbose=True)


@pytest.mark.parametrize(("query", "name"), [(MATCH, "match"), (DELIVERIES, "deliveries")])
async def test_an_unknown_effect_is_looked_up_through_an_index_under_a_generic_plan(
    conn: asyncpg.Connection, query: str, name: str
) -> None:
    plan = await generic_plan(conn, query, name)

    assert "$1" in plan, plan  # the generic plan: the parameter is not folded in
    assert "Seq Scan" not in plan, plan
    assert "Index" in plan, plan


@pytest.mark.parametrize("made_on", [0, 50], ids=["empty", "first_analysed"])
async def test_the_checks_plan_made_on_a_young_database_reads_the_grown_tables_by_index(
    fresh_database: str, made_on: int
) -> None:
    types, values = PARAMETERS["deliveries"]
    young, grown = await large_tables.plan_kept(
        fresh_database, made_on, ROWS, DELIVERIES, types, values, GENERIC_PLANS
    )

    # The plan made on the young tables is the one run on the grown ones.
    assert grown.splitlines()[0].startswith(young.splitlines()[0]), (young, grown)
    assert "Seq Scan" not in grown, grown
    assert "Hash" not in grown, grown
    for index in (
        "operations_op_key",
        "operations_comp_key_set",
        "intent_keys_pkey",
        "intents_pkey",
    ):
        assert index in grown, (index, grown)
    assert "Index Cond: ((provider = a.account) AND (delivery_id = a.delivery_id))" in grown


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


async def test_one_statement_tells_each_delivery_handled_or_not_and_finds_its_first_known_key(
    conn: asyncpg.Connection,
) -> None:
    since = datetime.now(UTC) - timedelta(days=1)
    # Handled after `since`, then before it (a new window): one statement for all four.
    asked = [
        Asked("sandbox", "whd-5", since, "sandbox", ("rk1_c17",)),
        Asked("sandbox", "whd-new", since, "sandbox", ("nobody", "rc1_r42", "rk1_c9")),
        Asked("sandbox", "whd-other", since, "sandbox", ()),
        Asked("x", "whd-5", datetime.now(UTC) + timedelta(days=1), "x", ()),
        Asked("sandbox", "whd-5", since + timedelta(days=2), "sandbox", ("rk1_c9", "rk1_c17")),
    ]

    handled, new, unread, other_account, expired = await look_up_all(conn, asked)

    assert handled.seen and handled.matched is not None and handled.matched.tx_id == "tx-17"
    assert not new.seen and new.matched is not None
    # The earliest key recon knows wins, not the first leg found.
    assert (new.matched.tx_id, new.matched.op_key) == ("tx-42", "rc1_r42")
    assert (unread.seen, unread.matched) == (False, None)
    assert (other_account.seen, other_account.matched) == (False, None)
    # Each delivery's keys are its own, in its own order.
    assert not expired.seen and expired.matched is not None
    assert (expired.matched.tx_id, expired.matched.op_key) == ("tx-9", "rk1_c9")
