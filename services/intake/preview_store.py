"""Stored previews (POST /v1/previews), per tenant: what an approval is checked against.

A store, like services.intake.abort_record: it is handed the route's TenantStore, so the
tenant it reads and writes is the caller's. The table is governance state
(services/migrations, applied by the migrate step before any process starts). It is
bounded: storing a preview deletes the older previews of the same proposal (an approval
must name the latest, so they can approve nothing) and every preview older than
PREVIEW_RETENTION_S (an approval of a step held that long previews again).
"""

import json
from typing import Any

import asyncpg

from services.intake.tenant_store import TenantStore

PREVIEW_RETENTION_S = 7 * 86400.0


async def store_preview(
    store: TenantStore,
    preview_id: str,
    tx_id: str,
    proposal_digest: str,
    digest: str,
    body: dict[str, Any],
) -> None:
    """Record it; the same preview again (same state, same proposal) becomes the latest."""
    conn, tenant = store.conn, store.tenant
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO previews (tenant, preview_id, tx_id, proposal_digest, digest, body)"
            " VALUES ($1, $2, $3, $4, $5, $6::jsonb) ON CONFLICT (tenant, preview_id)"
            " DO UPDATE SET created_at = now()",
            tenant,
            preview_id,
            tx_id,
            proposal_digest,
            digest,
            json.dumps(body),
        )
        await conn.execute(
            "DELETE FROM previews WHERE tenant = $1 AND proposal_digest = $2 AND preview_id <> $3",
            tenant,
            proposal_digest,
            preview_id,
        )
        await conn.execute(
            "DELETE FROM previews WHERE created_at < now() - make_interval(secs => $1)",
            PREVIEW_RETENTION_S,
        )


async def latest_preview(store: TenantStore, proposal_digest: str) -> asyncpg.Record | None:
    """The newest preview of this proposal: an approval must name it, not an older one."""
    row: asyncpg.Record | None = await store.conn.fetchrow(
        "SELECT preview_id, digest, body, created_at FROM previews"
        " WHERE tenant = $1 AND proposal_digest = $2 ORDER BY created_at DESC LIMIT 1",
        store.tenant,
        proposal_digest,
    )
    return row
