"""A process starting up while others write must not deadlock with them (real Postgres).

Seen under load, when each process applied the schema at start-up: DeadlockDetectedError,
AccessExclusiveLock against RowExclusiveLock, in the dispatcher's and the projector's logs.
The start-up's `ALTER TABLE ... ADD COLUMN IF NOT EXISTS` locked operations exclusively, then
waited for intents, held by a writer that wanted operations next. A start-up now only reads
the schema's version (services.migrate.require_current); here that writer is held between
its two tables while a start-up checks it.
"""

from __future__ import annotations

import asyncio

import asyncpg

from services.migrate import require_current

TIMEOUT_S = 20.0


async def _blocked_on_a_lock(admin: asyncpg.Connection, pid: int) -> bool:
    wait: str | None = await admin.fetchval(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", pid
    )
    return wait == "Lock"


async def test_a_start_up_on_a_current_schema_takes_no_table_lock(fresh_database: str) -> None:
    first = await asyncpg.connect(fresh_database)
    writer = await asyncpg.connect(fresh_database)
    starting = await asyncpg.connect(fresh_database)
    try:
        writer_tx = writer.transaction()
        await writer_tx.start()
        # A RowExclusiveLock on intents, as the intake's and dispatcher's writes take.
        await writer.execute("UPDATE intents SET produced = produced WHERE false")

        start_up = asyncio.create_task(require_current(starting))
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
