"""Applying the schema."""

from pathlib import Path

import asyncpg

SCHEMA = (Path(__file__).with_name("schema.sql")).read_text()
_LOCK_ID = 0x7265636F6E  # "recon": serializes concurrent start-ups


async def apply_schema(conn: asyncpg.Connection) -> None:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_ID)
        await conn.execute(SCHEMA)
