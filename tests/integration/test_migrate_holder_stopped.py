"""A migration run that stopped while holding the migration lock (its process frozen, its
host lost, with the socket open) holds the next run only until Postgres ends the stopped
run's session, `idle_bound_s` after it last sent anything (services.migrate's docstring);
and the bound is on idle, never on work: a run whose statement waits longer than the bound
is not cut. Real Postgres; a 1 s bound."""

from __future__ import annotations

import asyncio
import threading
import time

import asyncpg
import pytest

from services.migrate import CODE_VERSION, TABLE, MigrateError, migrate, migration_ids
from services.migrate import Outcome as Migrated

BOUND_S = 1.0


async def test_a_run_stopped_holding_the_lock_lets_the_next_run_through_after_the_bound(
    empty_database: str,
) -> None:
    # The stopped run holds the lock and sends nothing more, as Postgres sees a frozen
    # process: it stops in its own progress line, between two statements.
    stopped, go_on = threading.Event(), threading.Event()

    def stop_at_first_migration(line: str) -> None:
        if line.startswith("  applying "):
            stopped.set()
            go_on.wait(60)

    first = asyncio.ensure_future(
        asyncio.to_thread(migrate, empty_database, stop_at_first_migration, BOUND_S)
    )
    second: asyncio.Future[Migrated] | None = None
    try:
        assert await asyncio.to_thread(stopped.wait, 30), "the first run never got the lock"
        lines: list[str] = []
        t0 = time.monotonic()
        second = asyncio.ensure_future(
            asyncio.to_thread(migrate, empty_database, lines.append, BOUND_S)
        )
        outcome = await asyncio.wait_for(asyncio.shield(second), 15)
        took = time.monotonic() - t0
        print(f"the second run finished {took:.1f} s after it started")
        assert outcome.after == CODE_VERSION
        assert outcome.applied == migration_ids()  # the first applied none: it stopped before
        waiting = [line for line in lines if line.startswith("another migration run holds")]
        assert len(waiting) == 1, lines
        assert "Postgres pid " in waiting[0] and "pg_terminate_backend(" in waiting[0]
    finally:
        go_on.set()
        if second is not None and not second.done():
            # The bound did not work: end the stopped run's session ourselves, so that the
            # second run's thread finishes and the test process can exit.
            admin = await asyncpg.connect(empty_database)
            try:
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks"
                    " WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()"
                )
            finally:
                await admin.close()
            await second
    # Thawed, the first run finds its session ended, says so and what to do, changes nothing.
    with pytest.raises(MigrateError, match=r"session was ended.*Run migrate again"):
        await first
    conn = await asyncpg.connect(empty_database)
    try:
        applied = [r[0] for r in await conn.fetch(f"SELECT migration_id FROM {TABLE} ORDER BY 1")]
        assert applied == migration_ids()
    finally:
        await conn.close()


async def test_a_run_whose_statement_waits_past_the_bound_is_not_cut(
    fresh_database: str,
) -> None:
    # 0013 is applied again (its statements are IF NOT EXISTS); its ALTER TABLE waits for a
    # lock held 3 s, three times the bound: an active statement is not idle.
    # Not the last one: 0014 creates a type, which cannot be created again.
    (again,) = [m for m in migration_ids() if m.startswith("0013.")]
    conn = await asyncpg.connect(fresh_database)
    try:
        await conn.execute(f"DELETE FROM {TABLE} WHERE migration_id = $1", again)
        lines: list[str] = []
        async with conn.transaction():
            await conn.execute("LOCK TABLE call_fences IN ACCESS SHARE MODE")
            run = asyncio.ensure_future(
                asyncio.to_thread(migrate, fresh_database, lines.append, BOUND_S)
            )
            await asyncio.sleep(3 * BOUND_S)
            assert not run.done(), lines
        outcome = await asyncio.wait_for(run, 15)
        assert outcome.applied == [again]
        assert outcome.after == CODE_VERSION
    finally:
        await conn.close()
