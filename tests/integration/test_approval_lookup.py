"""A step found by its approval id (POST /v1/approvals/{key}/reject naming an `ap_...`:
services.intake.tenant_store.APPROVED_STEP) is read by the index of migration 0015, not
found by reading the tenant's history: the rows of `events` and the buffers the lookup
reads stay where they were when the tenant's log grows tenfold. And the lookup is the
tenant's: another tenant's approval id is never found, even for a transaction of the same
tx_id. Real Postgres at the code's schema, the events built by the real decider
(services.devtools.approved_log) and written by the projector's statement.
"""

from __future__ import annotations

import asyncpg
import pytest

from services.devtools.approval_lookup_cost import EVENTS_PER_TX, INDEX, explain, fill
from services.intake.tenant_store import TenantStore

TENANT, OTHER = "demo", "other"
UNKNOWN = "ap_" + "0" * 32  # no approval has it: the lookup's most to read, a 404


@pytest.mark.parametrize("mode", ["auto", "force_generic_plan"])
async def test_a_step_is_found_by_its_approval_id_without_reading_the_tenants_history(
    conn: asyncpg.Connection, mode: str
) -> None:
    await conn.execute(f"SET plan_cache_mode = {mode}")
    approvals = await fill(conn, TENANT, range(40), 0)
    await conn.execute("ANALYZE events")
    # The newest approval: last in the tenant's primary key too, so a scan of the history
    # reads all of it before it, as it does for an id no approval has.
    short = [await explain(conn, TENANT, key) for key in (approvals[-1], UNKNOWN)]
    approvals += await fill(conn, TENANT, range(40, 400), 40 * EVENTS_PER_TX)
    await conn.execute("ANALYZE events")
    long = [await explain(conn, TENANT, key) for key in (approvals[-1], UNKNOWN)]

    for found, was, now in zip((True, False), short, long, strict=True):
        # The approval's own row, or none: whatever the history's length (320, 3200 events).
        assert (was.rows, now.rows) == (int(found), int(found)), (
            f"rows of events read for {'the newest approval' if found else 'an unknown id'}:"
            f" {was.rows} in a history of 320 events, {now.rows} in one of 3200"
        )
        # One more level of the index at most, as its approvals outgrow a page.
        assert now.buffers <= was.buffers + 1, (was.buffers, now.buffers, now.plan)
        assert INDEX in now.plan, now.plan
    row = await TenantStore(conn, TENANT).step(approvals[-1])
    assert row is not None and row["action"] == "charge"


async def test_another_tenants_approval_id_is_never_found(conn: asyncpg.Connection) -> None:
    # The same tx_ids in both tenants, so only the tenant tells their approvals apart.
    ours = await fill(conn, TENANT, range(3), 0)
    theirs = await fill(conn, OTHER, range(3), 3 * EVENTS_PER_TX)

    for key in ours:
        assert await TenantStore(conn, OTHER).step(key) is None, "another tenant's step found"
        row = await TenantStore(conn, TENANT).step(key)
        assert row is not None and row["action"] == "charge", key
    for key in theirs:
        assert await TenantStore(conn, TENANT).step(key) is None, "another tenant's step found"
        assert await TenantStore(conn, OTHER).step(key) is not None, key
