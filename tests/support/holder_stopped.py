"""A Postgres transaction's holder that stops without closing its connection (its host
lost, a network cut, its process frozen), as Postgres sees one: a connection that sends
nothing more inside its transaction. For the tests of projections.held_open's bound."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import asyncpg

# What a holder calls once it holds what it is to hold: it never returns.
Stop = Callable[[], Awaitable[None]]


@contextlib.asynccontextmanager
async def connections(url: str, n: int) -> AsyncIterator[list[asyncpg.Connection]]:
    """`n` connections of their own (not a pool's), closed after (those Postgres ended too)."""
    opened = [await asyncpg.connect(url) for _ in range(n)]
    try:
        yield opened
    finally:
        for conn in opened:
            with contextlib.suppress(Exception):
                await conn.close()


@contextlib.asynccontextmanager
async def holder_stopped(
    hold: Callable[[Stop], Coroutine[Any, Any, None]],
) -> AsyncIterator[None]:
    """Runs `hold` (which opens its transaction, takes what it holds, then calls the `Stop`
    it is given) and the block once it stopped; `hold` failing before it stops fails this."""
    holding = asyncio.Event()

    async def stop() -> None:
        holding.set()
        await asyncio.sleep(3600)  # stopped, its connection open: nothing more is sent

    held = asyncio.create_task(hold(stop))
    stopped = asyncio.create_task(holding.wait())
    try:
        await asyncio.wait({held, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if held.done():
            held.result()  # its error; or it returned without stopping
            raise AssertionError("the holder returned instead of stopping")
        yield
    finally:
        for task in (held, stopped):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
