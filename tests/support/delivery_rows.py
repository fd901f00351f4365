"""The webhook deliveries an intake has recorded (`webhook_deliveries`), read once it has
written them: it records a delivery after answering it, with its next check or within
services.intake.delivery_batches.RECORD_BOUND_S."""

import asyncio

import asyncpg

from services.intake.delivery_batches import RECORD_BOUND_S

Row = tuple[str, str]  # the account (the table's `provider`), the delivery id


async def written(database_url: str, expected: list[Row], timeout: float = 10) -> None:
    """Until the recorded deliveries are `expected` (in any order), and still are a bound
    later: a delivery recorded by mistake has been written by then too."""
    want = sorted(expected)
    conn = await asyncpg.connect(database_url)
    try:
        found = await rows(conn)
        try:
            async with asyncio.timeout(timeout):
                while found != want:
                    await asyncio.sleep(RECORD_BOUND_S / 4)
                    found = await rows(conn)
        except TimeoutError:
            raise AssertionError(f"deliveries recorded {found}, expected {want}") from None
        await asyncio.sleep(2 * RECORD_BOUND_S)
        assert await rows(conn) == want
    finally:
        await conn.close()


async def rows(conn: asyncpg.Connection) -> list[Row]:
    """Every delivery recorded, sorted."""
    found = await conn.fetch("SELECT provider, delivery_id FROM webhook_deliveries")
    return sorted((r["provider"], r["delivery_id"]) for r in found)


# How many deliveries of an id are recorded, by any account.
BY_ID = "SELECT count(*) FROM webhook_deliveries WHERE delivery_id = $1"


async def until_recorded(database_url: str, delivery_id: str, timeout: float = 10) -> None:
    """Until a delivery of this id is recorded (by any account: a stack's table holds other
    tests' deliveries, so `written` does not fit)."""
    conn = await asyncpg.connect(database_url)
    try:
        async with asyncio.timeout(timeout):
            while await conn.fetchval(BY_ID, delivery_id) != 1:
                await asyncio.sleep(RECORD_BOUND_S / 4)
    except TimeoutError:
        raise AssertionError(f"delivery {delivery_id} not recorded in {timeout} s") from None
    finally:
        await conn.close()
