"""The gate's begin (services.dispatcher.calls_begun._BEGIN, one statement per batch of calls
a partition's transaction committed) is planned once per connection, not at every call, and
the plan it keeps reaches every table by primary key on tables grown large. By Postgres's
default choice it was planned again at almost every call: a custom plan counts the batch's
calls in the arrays, the generic one guesses 10, so the generic never cost as little as the
custom plans' average (calls_begun.open_begin_pool). Real Postgres.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from support import large_tables
from support.begun_by import DEAD_HOLDER, LAPSED_S

from events.topics import Topics
from services.config import Settings
from services.dispatcher import calls_begun
from services.dispatcher.calls_begun import _BEGIN, Call
from services.dispatcher.gatekeeper import Gatekeeper
from services.pg_pool import GENERIC_PLANS

ROWS = 3000
TYPES = (
    "int[], text[], text[], text[], text[], int[], text[], text[], text[], text[], float8[],"
    " text[], bigint[], int[], text[]"
)


@pytest.fixture
async def gate(fresh_database: str) -> AsyncIterator[Gatekeeper]:
    settings = Settings(
        kafka_bootstrap="", database_url=fresh_database, topics=Topics(""), environment="test"
    )
    gate = Gatekeeper(settings, None)  # begins only: no review is asked, no producer
    yield gate
    await gate.close()


def calls(n: int) -> list[Call]:
    """A transaction's three forward calls, as a partition's transaction commits them (keys
    of their own: large_tables begins the calls of its intents)."""
    return [
        Call(
            "acme",
            f"gate-{n}",
            f"rk9_{leg}{n}",
            "forward",
            1,
            "agent",
            "sandbox",
            operation,
            DEAD_HOLDER,
            LAPSED_S,
            None,
        )
        for leg, operation in (("r", "inventory.reserve"), ("c", "payments.charge"), ("e", "x"))
    ]


async def test_the_begin_is_not_planned_again_once_the_tables_have_grown(
    gate: Gatekeeper, fresh_database: str
) -> None:
    # A decider that starts on near-empty tables (a new deployment, the benchmark's
    # warm-up) makes its first plans there, then begins calls on grown tables.
    for n in range(6):
        assert all(b.written for b in await gate._begin_many(calls(n)))
    async with large_tables.filled(fresh_database, ROWS) as conn:
        await conn.execute("ANALYZE")
    for n in range(6, 12):
        assert all(b.written for b in await gate._begin_many(calls(n)))

    pool = await gate._begin_pool()
    async with pool.acquire() as conn:
        planned = await conn.fetchrow(
            "SELECT custom_plans, generic_plans FROM pg_prepared_statements WHERE statement = $1",
            _BEGIN,
        )
    assert (planned["custom_plans"], planned["generic_plans"]) == (0, 12), planned


async def test_the_generic_plan_of_the_begin_probes_each_table_by_its_key(
    fresh_database: str,
) -> None:
    # Made on tables grown large (an EXISTS of the begun row was planned as one hash of the
    # whole of calls_begun per execution on small tables).
    async with large_tables.filled(fresh_database, ROWS) as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        probes_by_key(await generic_plan(conn))


@pytest.mark.parametrize("made_on", [0, 50], ids=["empty", "first_analysed"])
async def test_the_begins_plan_made_on_a_young_database_probes_the_grown_tables_by_key(
    fresh_database: str, made_on: int
) -> None:
    # A decider keeps the plan it made on a young database's tables (empty, or first
    # analysed at a few dozen rows) until an ANALYZE of one of them: there a Seq Scan of
    # each costs least, which the pool's settings rule out.
    young, grown = await large_tables.plan_kept(
        fresh_database, made_on, ROWS, _BEGIN, TYPES, A_BEGUN_CALL, GENERIC_PLANS
    )

    assert grown.splitlines()[0].startswith(young.splitlines()[0]), (young, grown)
    probes_by_key(grown)


def probes_by_key(plan: str) -> None:
    assert "Seq Scan on calls_begun" not in plan, plan
    assert "Seq Scan on intents" not in plan, plan
    assert plan.count("calls_begun_pkey") == 2, plan  # the abort's and the redelivery's
    assert "intents_pkey" in plan, plan
    # One row per partition, and per Kafka cluster: a scan costs what a probe does.
    assert "call_fences" in plan, plan
    assert "kafka_clusters" in plan, plan


# A forward call large_tables began: the begin finds its row and writes nothing.
A_BEGUN_CALL = (
    "ARRAY[1], ARRAY['acme'], ARRAY['tx-17'], ARRAY['rk1_c17'], ARRAY['forward'], ARRAY[1],"
    " ARRAY['agent'], ARRAY['sandbox'], ARRAY['payments.charge'], ARRAY['holder'], ARRAY[10.0],"
    " ARRAY['recon-decider-0'], ARRAY[7::bigint], ARRAY[3], ARRAY['x9oM2vKcQWu3hPz1sTn0bA']"
)


async def generic_plan(conn: asyncpg.Connection) -> str:
    # A generic plan does not depend on the values: NULLs stand for any.
    return await large_tables.plan(conn, _BEGIN, TYPES, ", ".join(["NULL"] * 15), False)


async def test_the_begin_pool_plans_generically(fresh_database: str) -> None:
    pool = await calls_begun.open_begin_pool(fresh_database)
    try:
        async with pool.acquire() as conn:
            for name, value in GENERIC_PLANS.items():
                assert await conn.fetchval(f"SHOW {name}") == value
    finally:
        await pool.close()
