"""Previews are gated by grants and the governance tables are bounded (issue 18, item 14):
an agent denied an operation cannot read the provider's state through a preview of it (403
`not_granted`, nothing stored, no provider asked); a new preview of a proposal replaces the
older ones and expired previews are deleted; a quota claim past every window of its quotas
(and the dedupe floor) is deleted when the next one is counted. Real Postgres and Kafka.
"""

from __future__ import annotations

from typing import Any

import asyncpg
from support.governance_support import charge
from support.intake_app import intake_client, settings_fixture

from events.policy import Quota
from services.governance import store
from services.intake.preview_store import PREVIEW_RETENTION_S, latest_preview, store_preview
from services.intake.tenant_store import TenantStore

settings = settings_fixture()
AGENT = {"Authorization": "Bearer key-acme"}
OPERATOR = {"Authorization": "Bearer ops-acme"}
# agent-7 may refund, not charge.
POLICY = {"version": 1, "agents": {"agent-7": {"grants": ["payments.refund"]}}}


async def test_a_preview_of_an_ungranted_operation_is_refused_and_stores_nothing(
    settings: Any,
) -> None:
    async with intake_client(settings) as http:
        assert (await http.put("/v1/policy", json=POLICY, headers=OPERATOR)).status_code == 200
        answer = await http.post("/v1/previews", json=charge("pv-denied"), headers=AGENT)
    # Refused by the gate before any provider is asked (the sandbox here answers nothing,
    # so a preview that got that far would be a 409 provider_unavailable).
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"] == "not_granted", answer.json()
    conn = await asyncpg.connect(settings.database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM previews") == 0
    finally:
        await conn.close()


async def test_previews_keep_the_latest_of_a_proposal_and_expire(settings: Any) -> None:
    conn = await asyncpg.connect(settings.database_url)
    try:
        for n in range(3):
            await store_preview(
                TenantStore(conn, "acme"), f"pv_{n}", "tx-1", "proposal-1", f"d{n}", {"n": n}
            )
        rows = await conn.fetch(
            "SELECT preview_id FROM previews WHERE proposal_digest = $1", "proposal-1"
        )
        assert [r["preview_id"] for r in rows] == ["pv_2"]
        latest = await latest_preview(TenantStore(conn, "acme"), "proposal-1")
        assert latest is not None and latest["digest"] == "d2"
        # A preview older than the retention is deleted by the next one stored, any tenant's.
        await conn.execute(
            "UPDATE previews SET created_at = now() - make_interval(secs => $1)",
            PREVIEW_RETENTION_S + 60,
        )
        await store_preview(TenantStore(conn, "other"), "pv_x", "tx-2", "proposal-2", "dx", {})
        assert await conn.fetchval("SELECT count(*) FROM previews WHERE tenant = 'acme'") == 0
        assert await conn.fetchval("SELECT count(*) FROM previews WHERE tenant = 'other'") == 1
    finally:
        await conn.close()


async def test_quota_claims_past_every_window_are_deleted(settings: Any) -> None:
    conn = await asyncpg.connect(settings.database_url)
    try:
        quota = Quota(operation="payments.charge", window_s=60, max_count=5)
        # Given one claim past the window and the dedupe floor, one inside the floor only
        for op_key, age_s in (("old", store.CLAIM_DEDUPE_S + 600), ("recent", 600)):
            await conn.execute(
                "INSERT INTO quota_claims (tenant, agent_id, operation, op_key, amount,"
                " claimed_at) VALUES ('acme', 'agent-7', 'payments.charge', $1, 1,"
                " clock_timestamp() - make_interval(secs => $2))",
                op_key,
                float(age_s),
            )
        # When the next dispatch is counted
        exceeded = await store.reserve_quota(
            conn,
            tenant="acme",
            agent_id="agent-7",
            operation="payments.charge",
            op_key="new",
            amount=1,
            quotas=(quota,),
        )
        assert exceeded is None
        # Then the old claim is gone; the recent one still deduplicates its key
        rows = await conn.fetch("SELECT op_key FROM quota_claims ORDER BY op_key")
        assert [r["op_key"] for r in rows] == ["new", "recent"]
    finally:
        await conn.close()
