"""The intake under many clients (issue 7, item 15): `services.devtools.bench -c 100` died with
httpx.ReadError because the intake closed idle keep-alive connections after uvicorn's
default 5 s, the same as httpx's pool expiry, so a client could reuse a connection at the
moment the intake closed it. Only the intake process runs here: accepting an intent needs
Kafka and Postgres, not the consumers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import httpx
import pytest
from conftest import Infra

from services.devtools.stack import Stack
from services.intake.__main__ import KEEP_ALIVE_S
from services.intake.example import example_transaction

pytestmark = pytest.mark.timeout(180)

KEY = "Authorization: Bearer demo-key"
# httpx's default pool expiry, the shortest of the common clients' (aiohttp 15 s, Go 90 s).
CLIENT_POOL_EXPIRY_S = 5.0


@pytest.fixture
async def intake(
    infra: Infra,
    fresh_database: str,
    topic_prefix: str,
    tmp_path: Path,
    free_port: Callable[[], int],
) -> AsyncIterator[Stack]:
    stack = Stack(
        kafka_bootstrap=infra.kafka_bootstrap,
        database_url=fresh_database,
        log_dir=tmp_path / "logs",
        topic_prefix=topic_prefix,
        intake_port=free_port(),
        extra_env={"RECON_LOG_LEVEL": "WARNING"},
    )
    stack.start("intake")
    try:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                try:
                    # Served only once the schema and the topics exist (the lifespan).
                    if (await client.get(f"{stack.intake_url}/openapi.json")).is_success:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, stack.log_tail("intake")
                await asyncio.sleep(0.2)
        yield stack
    finally:
        stack.stop_all()


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """One keep-alive request on an open connection; its status (0 if the intake closed)."""
    request = f"GET /v1/drift HTTP/1.1\r\nHost: intake\r\n{KEY}\r\nConnection: keep-alive\r\n\r\n"
    writer.write(request.encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return 0
    lines = head.decode().split("\r\n")
    length = next(int(v) for k, _, v in (h.partition(": ") for h in lines) if k == "content-length")
    await reader.readexactly(length)
    return int(lines[0].split()[1])


async def test_an_idle_connection_stays_open_longer_than_a_client_pool_keeps_it(
    intake: Stack,
) -> None:
    assert KEEP_ALIVE_S > CLIENT_POOL_EXPIRY_S * 2
    reader, writer = await asyncio.open_connection("127.0.0.1", intake.intake_port)
    try:
        assert await _exchange(reader, writer) == 200
        # The idle time is what is under test: past the client's pool expiry, so a pool
        # that reuses the connection up to then never meets the intake closing it.
        await asyncio.sleep(CLIENT_POOL_EXPIRY_S + 1)
        try:
            status = await _exchange(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            status = 0
        assert status == 200, "the intake closed an idle connection a client pool still holds"
    finally:
        writer.close()


async def test_300_concurrent_submissions_are_all_accepted(intake: Stack) -> None:
    count = 300
    limits = httpx.Limits(max_connections=count)
    headers = {"Authorization": "Bearer demo-key"}
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def one(i: int) -> int:
            response = await client.post(
                f"{intake.intake_url}/v1/transactions",
                json=example_transaction(f"load-{i}"),
                headers=headers,
            )
            return response.status_code

        statuses = await asyncio.gather(*(one(i) for i in range(count)))
    assert statuses == [202] * count
    conn = await asyncpg.connect(intake.database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM intents") == count
    finally:
        await conn.close()
