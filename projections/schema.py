"""Applying the schema: once per version, never again at every start-up.

Each process applies the schemas it needs when it starts. The statements are idempotent,
but idempotent is not free: `ALTER TABLE ... ADD COLUMN IF NOT EXISTS` takes an
AccessExclusiveLock on its table even when the column is there, and `CREATE INDEX IF NOT
EXISTS` a ShareLock. A process restarted under load (the chaos nemesis, `make run`'s
restarts) then deadlocked with the others' transactions: it held operations' lock and
waited for intents', while a dispatcher or projector transaction held a RowExclusiveLock on
intents and waited for operations (Postgres' DeadlockDetectedError, AccessExclusiveLock vs
RowExclusiveLock). So each schema text is run once: its digest is recorded in the same
transaction, and a start-up that finds it takes no table lock at all.
"""

import hashlib
from pathlib import Path

import asyncpg

SCHEMA = (Path(__file__).with_name("schema.sql")).read_text()
_LOCK_ID = 0x7265636F6E  # "recon": serializes concurrent start-ups
# Held by every schema's application, whatever its own lock: CREATE TABLE IF NOT EXISTS is
# not safe against itself (two sessions both see no table, and the second fails on
# pg_type's unique index), and the projection, governance and reconciler schemas are
# applied under different locks by processes starting at the same moment.
_APPLIED_LOCK_ID = 0x7265636F6E_01

# Its own CREATE TABLE IF NOT EXISTS takes no lock once the table exists.
_APPLIED = """
CREATE TABLE IF NOT EXISTS schema_applied (
    digest     text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


async def apply_once(conn: asyncpg.Connection, lock_id: int, schema: str) -> bool:
    """Run `schema` unless this exact text was applied already; True if it ran now.

    The advisory lock serialises concurrent start-ups: the second one waits for the first
    to commit, then finds the digest and skips. A changed schema text (a new release) has a
    new digest and runs once, under the same lock.
    """
    digest = hashlib.sha256(schema.encode()).hexdigest()
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _APPLIED_LOCK_ID)
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_id)
        await conn.execute(_APPLIED)
        if await conn.fetchval("SELECT 1 FROM schema_applied WHERE digest = $1", digest):
            return False
        await conn.execute(schema)
        await conn.execute("INSERT INTO schema_applied (digest) VALUES ($1)", digest)
        return True


async def apply_schema(conn: asyncpg.Connection) -> None:
    await apply_once(conn, _LOCK_ID, SCHEMA)
