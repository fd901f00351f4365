"""A TCP relay a test opens when it wants a server "back": until then its port refuses
connections, as a server that is down does."""

import asyncio
import contextlib
from collections.abc import AsyncIterator


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def relay(port: int, target: str) -> AsyncIterator[None]:
    """Listen on `port` and pass every connection through to `target` (host:port)."""
    host, target_port = target.rsplit(":", 1)

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(target_port))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(connected, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()
