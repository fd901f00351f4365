"""recon's pools skip asyncpg's reset query on release (a round trip per acquire), and
still never hand out a connection inside a transaction left open."""

from types import SimpleNamespace

from services.pg_pool import create_pool
from services.projector.runtime import Projector


async def test_a_released_connection_keeps_its_session_not_its_transaction(
    database_url: str,
) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            # Session state that RESET ALL would undo: proof that no reset query ran.
            await conn.execute("SET application_name = 'recon-pool-test'")
            await conn.execute("BEGIN")
            await conn.execute("CREATE TEMP TABLE left_open (x int)")
        async with pool.acquire() as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SHOW application_name") == "recon-pool-test"
            # The open transaction was rolled back, not committed.
            assert await conn.fetchval("SELECT to_regclass('pg_temp.left_open')") is None
    finally:
        await pool.close()


async def test_the_projectors_expiry_replaces_a_connection_that_saw_the_server_go(
    database_url: str,
) -> None:
    # After a database failure the projector expires its pool, so that no connection to
    # the server that went away is handed out again (asyncpg's expiry is a coroutine).
    pool = await create_pool(database_url, min_size=1, max_size=1)
    projector = SimpleNamespace(pool=pool)
    try:
        before = await pool.fetchval("SELECT pg_backend_pid()")
        await Projector.pool_expire(projector)  # type: ignore[arg-type]
        after = await pool.fetchval("SELECT pg_backend_pid()")
    finally:
        await pool.close()
    assert after != before
