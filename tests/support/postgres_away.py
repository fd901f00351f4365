"""Postgres made unreachable for one test on a port of its own: the session's server, shared
with the other workers, is never touched."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit


def via_port(url: str, port: int) -> str:
    """`url` with its server at 127.0.0.1:`port`, user, password and database kept."""
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{port}"))


@contextlib.asynccontextmanager
async def frozen_postgres(port: int, reached: asyncio.Event) -> AsyncIterator[None]:
    """A server on `port` that takes every connection and answers nothing, as a SIGSTOPped
    or firewalled Postgres does (the kernel completes the handshake; asyncpg then waits its
    connect timeout, 60 s); `reached` set at the first connection."""
    held: list[asyncio.StreamWriter] = []

    async def taken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        reached.set()

    server = await asyncio.start_server(taken, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()
        for writer in held:
            writer.close()
