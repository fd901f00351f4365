"""A broker connection reset under uvloop does not end an aiokafka client's metadata refresh.

Seen in CI (tests/fault/test_cluster_broker_kills.py, before services.kafka_uvloop): at a
broker kill a decider producer's metadata task died without a line, so its retried produce,
which waits for a refresh, was never sent again and its transaction never ended. The reset
is a real one here: a real broker behind a local proxy that resets the client's socket
(SO_LINGER 0, as a broker killed with our request unread does), on uvloop as recon runs.
In the loop turns between uvloop closing the transport and aiokafka noticing, a refresh is
asked for, as a failed produce or a sibling connection's close asks for one; the refresh
must then complete, and the client's metadata task live on. And the CI failure itself: a
transaction whose produce was on the wire at the reset must commit (without the mend its
produce, failed with the connection and re-queued, waits for the refresh for good).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from typing import Any

import pytest
import uvloop
from aiokafka import AIOKafkaProducer
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import create_conn
from support.topic_setup import create_topic

from services import kafka_uvloop


class ResettingProxy:
    """Forwards TCP to one broker; `reset()` resets every client connection it carries.
    While `holding`, what the client sends is kept back (counted in `held`): a request on the
    wire to a broker that does not answer, as when the broker is killed."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.clients: list[asyncio.StreamWriter] = []
        self.pumps: set[asyncio.Task[None]] = set()
        self.holding = False
        self.held = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients.append(writer)
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        for pump in (self._pump(reader, up_writer, outbound=True), _pump(up_reader, writer)):
            task = asyncio.create_task(pump)
            self.pumps.add(task)
            task.add_done_callback(self.pumps.discard)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, outbound: bool
    ) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            while data := await source.read(65536):
                if outbound and self.holding:
                    self.held += len(data)
                    continue
                sink.write(data)
                await sink.drain()
        sink.close()

    def reset(self) -> None:
        for writer in self.clients:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        self.clients.clear()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:  # inbound
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
    server: asyncio.Server | None = None
    try:
        proxy, server, conn = await _proxied(client)
        await asyncio.wait_for(client.force_metadata_update(), 10)  # through the proxy
        proxy.reset()
        refresh = await _refresh_in_the_window(client, conn)
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
        if server is not None:
            server.close()
        if client._sync_task is not None and client._sync_task.done():
            # Dead (the failure reported above): close() would raise its error again and
            # leave the connections open.
            client._sync_task = None
        await client.close()


async def _proxied(client: AIOKafkaClient) -> tuple[ResettingProxy, asyncio.Server, Any]:
    """The client's connection to its (one) broker, replaced by one through a proxy."""
    broker = client.cluster.brokers().pop()
    proxy = ResettingProxy(broker.host, broker.port)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    conn = await create_conn(
        "127.0.0.1",
        server.sockets[0].getsockname()[1],
        client_id="reset-test",
        request_timeout_ms=5000,
        on_close=client._on_connection_closed,
    )
    client._conns[(broker.nodeId, ConnectionGroup.DEFAULT)] = conn
    return proxy, server, conn


async def _refresh_in_the_window(client: AIOKafkaClient, conn: Any) -> Any:
    """Every loop turn until aiokafka has closed the reset connection; a refresh asked for
    at the first turn its transport is closing (as a failed produce or the close of a
    sibling connection asks for one), returned."""
    refresh = None
    deadline = time.monotonic() + 10
    while conn.connected() and time.monotonic() < deadline:
        await asyncio.sleep(0)
        if refresh is None and conn._writer is not None and conn._writer.transport.is_closing():
            refresh = client.force_metadata_update()
    assert refresh is not None, "the reset never reached the client's transport"
    return refresh


async def _transaction_across_a_reset(bootstrap: str, topic: str) -> bool:
    """Whether a transaction whose produce was on the wire at the reset committed."""
    await create_topic(bootstrap, topic, 1)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"{topic}-tx",
        acks="all",
        request_timeout_ms=5000,
    )
    await producer.start()
    server: asyncio.Server | None = None
    try:
        async with producer.transaction():  # the partition's leader and coordinator known
            await (await producer.send(topic, b"before", partition=0))
        proxy, server, conn = await _proxied(producer.client)
        proxy.holding = True
        await producer.begin_transaction()
        delivered = await producer.send(topic, b"across", partition=0)
        async with asyncio.timeout(10):
            while proxy.held == 0:  # the produce is on the wire, unanswered
                await asyncio.sleep(0.01)
        proxy.reset()
        await _refresh_in_the_window(producer.client, conn)
        try:
            async with asyncio.timeout(20):
                await delivered  # retried on a new connection
                await producer.commit_transaction()
        except TimeoutError:
            return False
        return True
    finally:
        if server is not None:
            server.close()
        sync = producer.client._sync_task
        if sync is not None and sync.done():
            producer.client._sync_task = None  # dead: close() would raise its error again
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.stop(), 5)


@pytest.mark.timeout(60)
def test_a_reset_connection_does_not_end_the_clients_metadata_refresh(
    kafka_bootstrap: str,
) -> None:
    kafka_uvloop.install()  # as services.event_loop does before it runs uvloop
    done, ended = uvloop.run(_refresh_across_a_reset(kafka_bootstrap))
    assert ended is None, f"the client's metadata task ended: {ended!r}"
    assert done, "the refresh asked for across the reset never completed"


@pytest.mark.timeout(90)
def test_a_transaction_whose_produce_met_a_reset_connection_commits(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    kafka_uvloop.install()  # as services.event_loop does before it runs uvloop
    committed = uvloop.run(_transaction_across_a_reset(kafka_bootstrap, f"{topic_prefix}reset"))
    assert committed, "the transaction never ended: its retried produce waits for a refresh"
