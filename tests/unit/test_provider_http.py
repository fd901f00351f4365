"""Whatever keeps a provider's answer from arriving is one error to the caller: the
outcome is unknown (services.providers.http), never an exception that ends a dispatcher."""

import asyncio

import pytest

from services.devtools.ports import free_port
from services.providers.http import MAX_ANSWER_BYTES, ProviderHttp, ProviderUnreachable


async def test_a_refused_connection_is_unreachable() -> None:
    async with ProviderHttp(1.0) as http:
        with pytest.raises(ProviderUnreachable, match="Connect"):
            await http.request("GET", f"http://127.0.0.1:{free_port()}/v1/effects")


async def test_a_provider_that_never_answers_times_out_as_unreachable() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with ProviderHttp(0.3) as http:
            with pytest.raises(ProviderUnreachable, match="Timeout"):
                await http.request("POST", f"http://127.0.0.1:{port}/v1/payments/charge", json={})
    finally:
        server.close()


async def test_an_answer_is_its_status_and_raw_bytes() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b'{"id": "ch_\\ud800"}'
        head = f"HTTP/1.1 402 Payment Required\r\nContent-Length: {len(body)}\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with ProviderHttp(2.0) as http:
            got = await http.request("GET", f"http://127.0.0.1:{port}/v1/effects")
    finally:
        server.close()
    assert (got.status, got.body) == (402, b'{"id": "ch_\\ud800"}')


async def test_an_answer_over_the_limit_is_not_read_and_is_unreachable() -> None:
    async def huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b"x" * (MAX_ANSWER_BYTES + 1)
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(huge, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with ProviderHttp(2.0) as http:
            with pytest.raises(ProviderUnreachable, match="over"):
                await http.request("GET", f"http://127.0.0.1:{port}/v1/effects")
    finally:
        server.close()
