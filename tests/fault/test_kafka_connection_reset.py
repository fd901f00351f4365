"""A broker connection reset under uvloop does not end an aiokafka client's metadata refresh.

Seen in CI (tests/fault/test_cluster_broker_kills.py, before services.kafka_uvloop): at a
broker kill a decider producer's metadata task died without a line, so its retried produce,
which waits for a refresh, was never sent again and its transaction never ended. The reset
is a real one here: a real broker behind a local proxy that resets the client's socket
(SO_LINGER 0, as a broker killed with our request unread does), on uvloop as recon runs.
In the loop turns between uvloop closing the transport and aiokafka noticing, a refresh is
asked for, as a failed produce or a sibling connection's close asks for one; the refresh
must then complete, and the client's metadata task live on.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time

import pytest
import uvloop
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import create_conn

from services import kafka_uvloop


class ResettingProxy:
    """Forwards TCP to one broker; `reset()` resets every client connection it carries."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.clients: list[asyncio.StreamWriter] = []
        self.pumps: set[asyncio.Task[None]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients.append(writer)
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.create_task(_pump(source, sink))
            self.pumps.add(pump)
            pump.add_done_callback(self.pumps.discard)

    def reset(self) -> None:
        for writer in self.clients:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        self.clients.clear()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, RuntimeError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    sink.close()


async def _refresh_across_a_reset(bootstrap: str) -> tuple[bool, BaseException | None]:
    """Whether the refresh asked for inside the reset's window completed, and what ended
    the client's metadata task (None: it lives)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await client.bootstrap()
    proxy_server: asyncio.Server | None = None
    try:
        broker = client.cluster.brokers().pop()
        proxy = ResettingProxy(broker.host, broker.port)
        proxy_server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
        proxy_port = proxy_server.sockets[0].getsockname()[1]
        # The client's connection to the broker goes through the proxy (in place of its
        # own), so that the test can reset it; the broker on the other side is real.
        key = (broker.nodeId, ConnectionGroup.DEFAULT)
        conn = await create_conn(
            "127.0.0.1",
            proxy_port,
            client_id="reset-test",
            request_timeout_ms=5000,
            on_close=client._on_connection_closed,
        )
        client._conns[key] = conn
        await asyncio.wait_for(client.force_metadata_update(), 10)  # through the proxy

        proxy.reset()
        refresh: asyncio.Future[bool] | None = None
        deadline = time.monotonic() + 10
        while conn.connected() and time.monotonic() < deadline:
            await asyncio.sleep(0)
            if refresh is None and conn._writer is not None:
                if conn._writer.transport.is_closing():
                    refresh = client.force_metadata_update()
        assert refresh is not None, "the reset never reached the client's transport"
        done = True
        try:
            await asyncio.wait_for(refresh, 10)
        except TimeoutError:
            done = False
        sync = client._sync_task
        assert sync is not None
        ended = None
        if sync.done():
            ended = sync.exception() if not sync.cancelled() else asyncio.CancelledError()
        return done, ended
    finally:
        if proxy_server is not None:
            proxy_server.close()
        if client._sync_task is not None and client._sync_task.done():
            # Dead (the failure reported above): close() would raise its error again and
            # leave the connections open.
            client._sync_task = None
        await client.close()


@pytest.mark.timeout(60)
def test_a_reset_connection_does_not_end_the_clients_metadata_refresh(
    kafka_bootstrap: str,
) -> None:
    kafka_uvloop.install()  # as services.event_loop does before it runs uvloop
    done, ended = uvloop.run(_refresh_across_a_reset(kafka_bootstrap))
    assert ended is None, f"the client's metadata task ended: {ended!r}"
    assert done, "the refresh asked for across the reset never completed"
