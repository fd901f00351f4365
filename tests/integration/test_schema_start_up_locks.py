"""A process starting up while others write must not deadlock with them (real Postgres).

Seen under load: DeadlockDetectedError, AccessExclusiveLock against RowExclusiveLock, in the
dispatcher's and the projector's logs. The start-up's `ALTER TABLE ... ADD COLUMN IF NOT
EXISTS` locked operations exclusively, then waited for intents, held by a writer that wanted
operations next. Here that writer is held between its two tables while a start-up applies
the schema.
"""

from __future__ import annotations

import asyncio

import asyncpg

from projections.schema import apply_once, apply_schema

TIMEOUT_S = 20.0


async def _blocked_on_a_lock(admin: asyncpg.Connection, pid: int) -> bool:
    wait: str | None = await admin.fetchval(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", pid
    )
    return wait == "Lock"


async def test_a_start_up_on_an_applied_schema_takes_no_table_lock(fresh_database: str) -> None:
    first = await asyncpg.connect(fresh_database)
    writer = await asyncpg.connect(fresh_database)
    starting = await asyncpg.connect(fresh_database)
    try:
        await apply_schema(first)  # the first process of this release applies it
        writer_tx = writer.transaction()
        await writer_tx.start()
        # A RowExclusiveLock on intents, as the intake's and dispatcher's writes take.
        await writer.execute("UPDATE intents SET produced = produced WHERE false")

        start_up = asyncio.create_task(apply_schema(starting))
        starting_pid = starting.get_server_pid()
        async with asyncio.timeout(TIMEOUT_S):
            while not start_up.done() and not await _blocked_on_a_lock(first, starting_pid):
                await asyncio.sleep(0.05)

        # The writer goes on to the next table; a start-up holding it would deadlock here.
        await writer.execute("UPDATE operations SET state = state WHERE false")
        await writer_tx.commit()
        async with asyncio.timeout(TIMEOUT_S):
            await start_up
    finally:
        for conn in (first, writer, starting):
            await conn.close()


async def test_a_changed_schema_text_runs_once(fresh_database: str) -> None:
    conn = await asyncpg.connect(fresh_database)
    try:
        ddl = "CREATE TABLE IF NOT EXISTS release_two (id int)"
        assert await apply_once(conn, 42, ddl) is True
        assert await apply_once(conn, 42, ddl) is False
        assert await conn.fetchval("SELECT to_regclass('release_two') IS NOT NULL") is True
    finally:
        await conn.close()


async def test_schemas_applied_under_different_locks_at_once_all_apply(
    fresh_database: str,
) -> None:
    # CI saw a projector fail its start-up with UniqueViolation on pg_type
    # (schema_applied): its CREATE TABLE IF NOT EXISTS raced another process applying
    # another schema under another lock. Many fresh start-ups at once, each its own schema.
    conns = [await asyncpg.connect(fresh_database) for _ in range(8)]
    try:
        texts = [f"CREATE TABLE IF NOT EXISTS racing_{n} (id int)" for n in range(len(conns))]
        ran = await asyncio.wait_for(
            asyncio.gather(
                *(
                    apply_once(c, 1000 + n, t)
                    for n, (c, t) in enumerate(zip(conns, texts, strict=True))
                )
            ),
            TIMEOUT_S,
        )
        assert ran == [True] * len(conns)
    finally:
        for c in conns:
            await c.close()
