"""The reconciler's bookkeeping is trimmed on its schedule, keeping what is still needed
(leases of legs in flight, review guards of open reviews, drift ids the scan can still find,
the dispatchers' "call begun" rows of legs in flight), and its drift scan reads `events`
through an index, not the whole audit log."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from events.topics import Topics
from reconcilers import store
from services.config import ReconcilerSettings, Settings
from services.pull_reconciler.runtime import open_reconciler

DAY = timedelta(days=1)


def _plan_nodes(plan: Any) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += _plan_nodes(child)
    return nodes


async def _generic_plan(conn: asyncpg.Connection, sql: str, types: str, args: str) -> str:
    # A prepared statement under force_generic_plan is what asyncpg's cached statements
    # become after a few runs: the plan must use the index without knowing the values.
    await conn.execute(f"PREPARE q({types}) AS {sql}")
    try:
        plan = json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE q({args})"))
    finally:
        await conn.execute("DEALLOCATE q")
    # How `events` is read: its scans, and the indexes any of them (bitmap ones too) use.
    return " ".join(
        f"{n['Node Type']}:{n.get('Index Name', '-')}"
        for n in _plan_nodes(plan[0]["Plan"])
        if n.get("Relation Name") == "events" or n.get("Index Name", "").startswith("events")
    )


async def test_the_drift_scan_reads_events_by_op_key_and_time_through_an_index(
    fresh_database: str,
) -> None:
    conn = await asyncpg.connect(fresh_database)
    try:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        # The tables are empty here: without this a sequential scan is always cheapest, so
        # only "no index can serve it" makes the planner choose one.
        await conn.execute("SET enable_seqscan = off")
        by_key = await _generic_plan(conn, store._KNOWN_KEYS, "text[]", "'{rk1_a,rk1_b}'")
        by_time = await _generic_plan(
            conn,
            store._LEDGER,
            "timestamptz, text, text[], timestamptz, text, timestamptz",
            "now() - interval '1 day', 'sandbox', '{rk1_a,rk1_b}', now(), NULL, NULL",
        )
    finally:
        await conn.close()
    assert by_key == "Index Scan:events_dispatched_op_key", by_key
    # The partial indexes read only the OperationDispatched rows, never the whole log: by
    # time, or by the listed keys and the covered time together (a bitmap of both); the
    # planner may prefer the op_key one for DISTINCT ON's order.
    assert by_time in (
        "Index Scan:events_dispatched_at",
        "Index Scan:events_dispatched_op_key",
        "Bitmap Heap Scan:- Bitmap Index Scan:events_dispatched_at",
        "Bitmap Heap Scan:- Bitmap Index Scan:events_dispatched_op_key"
        " Bitmap Index Scan:events_dispatched_at",
    ), by_time


async def _seed(conn: asyncpg.Connection, now: datetime) -> None:
    op = (
        "INSERT INTO operations (tenant, tx_id, action, position, kind, provider, operation,"
        " op_key, state, attempts, evidence, updated_at, comp_op_key, comp_state)"
        " VALUES ('demo', $1, 'charge', 0, 'step', 'sandbox', 'payments.charge', $2, $3, 1,"
        " '[]', $4, $5, $6)"
    )
    await conn.execute(op, "tx-inflight", "k_inflight", "unknown", now, None, None)
    await conn.execute(op, "tx-settled", "k_settled", "confirmed", now, None, None)
    await conn.execute(op, "tx-undo", "k_fwd", "compensating", now, "k_undo", "dispatched")
    lease = (
        "INSERT INTO reconciler_leases (op_key, attempt, lookups, next_at, updated_at)"
        " VALUES ($1, $2, 1, $3, $3)"
    )
    await conn.execute(lease, "k_inflight", 1, now - 30 * DAY)  # in flight: kept
    await conn.execute(lease, "k_settled", 1, now - 30 * DAY)  # settled and old: purged
    await conn.execute(lease, "k_settled", 2, now - 1 * DAY)  # settled, recent: kept
    await conn.execute(lease, "k_undo", 1, now - 30 * DAY)  # undo in flight: kept
    reported = "INSERT INTO reconciler_drift_reported VALUES ($1, 'mismatch', $2)"
    await conn.execute(reported, "dr_old", now - 9 * DAY)  # window 1 d + retention 7 d: purged
    await conn.execute(reported, "dr_recent", now - 7 * DAY)  # the scan may still find it
    review = (
        "INSERT INTO reviews (id, tenant, tx_id, action, leg, op_key, attempt, reason, state,"
        " created_at) VALUES ($1, 'demo', 'tx', 'charge', 'forward', 'k', 1, 'r', $2, $3)"
    )
    await conn.execute(review, "rv_resolved", "resolved", now - 30 * DAY)
    await conn.execute(review, "rv_open", "open", now - 30 * DAY)
    await conn.execute(review, "rv_resolved_recently", "resolved", now - DAY)
    resolution = (
        "INSERT INTO review_resolutions (review_id, tenant, resolution, note, actor, produced,"
        " created_at) VALUES ($1, 'demo', 'applied', '', 'ops', true, $2)"
    )
    await conn.execute(resolution, "rv_resolved", now - 30 * DAY)  # purged
    await conn.execute(resolution, "rv_open", now - 30 * DAY)  # its review is open: kept
    await conn.execute(resolution, "rv_resolved_recently", now - DAY)  # recent: kept
    begun = (
        "INSERT INTO calls_begun (tenant, op_key, leg, attempt, begun_at)"
        " VALUES ($1, $2, $3, $4, $5)"
    )
    await conn.execute(begun, "demo", "k_inflight", "forward", 1, now - 30 * DAY)  # kept
    await conn.execute(begun, "demo", "k_settled", "forward", 1, now - 30 * DAY)  # purged
    await conn.execute(begun, "demo", "k_settled", "forward", 2, now - DAY)  # recent: kept
    await conn.execute(begun, "demo", "k_undo", "compensation", 1, now - 30 * DAY)  # kept
    # Another tenant's leg of the same key is settled: its row goes, demo's stays.
    await conn.execute(begun, "acme", "k_inflight", "forward", 1, now - 30 * DAY)  # purged


async def test_purge_trims_settled_bookkeeping_and_keeps_what_is_still_needed(
    kafka_bootstrap: str, fresh_database: str, topic_prefix: str
) -> None:
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=fresh_database,
        topics=Topics(topic_prefix),
        environment="test",
        providers={},
        reconciler=ReconcilerSettings(drift_window_s=DAY.total_seconds(), retention_s=7 * 86400),
    )
    async with open_reconciler(settings) as reconciler:
        async with reconciler.pool.acquire() as conn:
            await _seed(conn, datetime.now(UTC))
        assert await reconciler.purge() == {
            "reconciler_leases": 1,
            "reconciler_drift_reported": 1,
            "review_resolutions": 1,
            "calls_begun": 2,
        }
        assert await reconciler.purge() == dict.fromkeys(
            ("reconciler_leases", "reconciler_drift_reported", "review_resolutions", "calls_begun"),
            0,
        )
        async with reconciler.pool.acquire() as conn:
            leases = await conn.fetch("SELECT op_key, attempt FROM reconciler_leases")
            reported = await conn.fetch("SELECT drift_id FROM reconciler_drift_reported")
            guards = await conn.fetch("SELECT review_id FROM review_resolutions")
            calls = await conn.fetch("SELECT tenant, op_key, attempt FROM calls_begun")
    assert sorted((r["op_key"], r["attempt"]) for r in leases) == [
        ("k_inflight", 1),
        ("k_settled", 2),
        ("k_undo", 1),
    ]
    assert [r["drift_id"] for r in reported] == ["dr_recent"]
    assert sorted(r["review_id"] for r in guards) == ["rv_open", "rv_resolved_recently"]
    assert sorted((r["tenant"], r["op_key"], r["attempt"]) for r in calls) == [
        ("demo", "k_inflight", 1),
        ("demo", "k_settled", 2),
        ("demo", "k_undo", 1),
    ]


@pytest.mark.parametrize("name", ["RECON_RECONCILER_RETENTION_S", "RECON_PURGE_INTERVAL_S"])
def test_retention_settings_are_read(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    from services.config import ConfigError, load_settings

    monkeypatch.setenv(name, "0")
    with pytest.raises(ConfigError, match=name):
        load_settings()
