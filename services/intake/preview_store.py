"""Stored previews (POST /v1/previews), per tenant: what an approval is checked against.

The table is the intake's own, created when first needed (under the schema's advisory
lock, so concurrent intakes do not race on it).
"""

import json
from typing import Any

import asyncpg

from projections.schema import _LOCK_ID

_SCHEMA = """
CREATE TABLE IF NOT EXISTS previews (
    tenant          text NOT NULL,
    preview_id      text NOT NULL,
    tx_id           text NOT NULL,
    proposal_digest text NOT NULL,
    digest          text NOT NULL,
    body            jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, preview_id)
);
CREATE INDEX IF NOT EXISTS previews_by_proposal ON previews (tenant, proposal_digest, created_at);
"""


async def _ensure(conn: asyncpg.Connection) -> None:
    # Idempotent and cheap once the table exists; previews and approvals are rare.
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_ID)
        await conn.execute(_SCHEMA)


async def store_preview(
    conn: asyncpg.Connection,
    tenant: str,
    preview_id: str,
    tx_id: str,
    proposal_digest: str,
    digest: str,
    body: dict[str, Any],
) -> None:
    """Record it; the same preview again (same state, same proposal) becomes the latest."""
    await _ensure(conn)
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


async def latest_preview(
    conn: asyncpg.Connection, tenant: str, proposal_digest: str
) -> asyncpg.Record | None:
    """The newest preview of this proposal: an approval must name it, not an older one."""
    await _ensure(conn)
    row: asyncpg.Record | None = await conn.fetchrow(
        "SELECT preview_id, digest, body, created_at FROM previews"
        " WHERE tenant = $1 AND proposal_digest = $2 ORDER BY created_at DESC LIMIT 1",
        tenant,
        proposal_digest,
    )
    return row
