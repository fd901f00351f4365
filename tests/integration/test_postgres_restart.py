"""Committed rows survive a clean restart and a crash of the Postgres server."""

from __future__ import annotations

import asyncpg

from services.devtools.infra import PostgresServer


async def write_row(url: str, value: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS survivors (value text PRIMARY KEY)")
        await conn.execute("INSERT INTO survivors (value) VALUES ($1)", value)
    finally:
        await conn.close()


async def read_rows(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        return [row["value"] for row in await conn.fetch("SELECT value FROM survivors ORDER BY 1")]
    finally:
        await conn.close()


async def test_row_survives_restart(postgres_server: PostgresServer, fresh_database: str) -> None:
    await write_row(fresh_database, "before-restart")

    postgres_server.restart()

    assert await read_rows(fresh_database) == ["before-restart"]


async def test_committed_row_survives_crash(
    postgres_server: PostgresServer, fresh_database: str
) -> None:
    await write_row(fresh_database, "before-crash")

    postgres_server.kill()
    postgres_server.start()

    assert await read_rows(fresh_database) == ["before-crash"]
