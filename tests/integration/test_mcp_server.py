"""The MCP server (`python -m services.mcp`) driven by the MCP client library, end to end
on the real stack: over stdio an agent submits a transaction and reads it until it is
committed; refusals come back as tool errors naming the API's code; over streamable HTTP
the same tools answer. The API key is the server's environment, never a tool argument."""

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack
from services.intake.example import example_transaction

READ_ONLY = {"get_transaction", "list_reviews", "preview"}


def _text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


def _structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    content: dict[str, Any] = result.structured_content
    return content


async def _committed(client: Client, tx_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    tx: dict[str, Any] = {}
    while time.monotonic() < deadline:
        tx = _structured(await client.call_tool("get_transaction", {"tx_id": tx_id}))
        if tx["status"] == "committed":
            return tx
        await asyncio.sleep(0.2)
    raise AssertionError(f"{tx_id} not committed after {timeout}s: {tx}")


async def test_an_agent_commits_a_transaction_through_the_mcp_server(
    stack: Stack, free_port: Callable[[], int]
) -> None:
    env = {"RECON_MCP_API_KEY": "demo-key", "RECON_MCP_INTAKE_URL": stack.intake_url}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "services.mcp"], env=env, cwd=REPO_ROOT
    )
    async with Client(params) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {
            "submit_transaction",
            "get_transaction",
            "preview",
            "abort_transaction",
            "list_reviews",
        }
        for name, tool in tools.items():
            assert tool.annotations is not None
            assert tool.annotations.read_only_hint is (name in READ_ONLY), name
            # The key is configuration: no tool lets the model name one (or a tenant).
            schema = json.dumps(tool.input_schema).lower()
            assert "api_key" not in schema and "tenant" not in schema, name
        # The submission schema is the intake's own request model.
        submit_schema = tools["submit_transaction"].input_schema
        assert "SubmissionRequest" in submit_schema["$defs"]

        accepted = _structured(
            await client.call_tool(
                "submit_transaction", {"transaction": example_transaction("mcp-1")}
            )
        )
        assert [o["action"] for o in accepted["operations"]] == ["reserve", "charge", "receipt"]
        tx = await _committed(client, "mcp-1")
        assert {o["op_key"] for o in tx["operations"]} == {
            o["op_key"] for o in accepted["operations"]
        }

        conflict = await client.call_tool(
            "submit_transaction",
            {"transaction": example_transaction("mcp-1", customer="cus_2")},
        )
        # The tool error names the API's code ("Error executing tool ...: tx_conflict: ...").
        assert conflict.is_error and "tx_conflict: " in _text(conflict), _text(conflict)
        late = await client.call_tool("abort_transaction", {"tx_id": "mcp-1"})
        assert late.is_error and "already_committed: " in _text(late), _text(late)
        invalid = await client.call_tool("get_transaction", {"tx_id": "not a valid id"})
        assert invalid.is_error
        reviews = _structured(await client.call_tool("list_reviews", {}))
        assert reviews == {"reviews": []}
        # The providers compute the preview; nothing is applied or recorded.
        preview = await client.call_tool("preview", {"transaction": example_transaction("p-1")})
        assert not preview.is_error, _text(preview)
        computed = _structured(preview)
        assert computed["digest"] and [s["action"] for s in computed["steps"]] == [
            "reserve",
            "charge",
        ], computed

    # Streamable HTTP: the same server, the same tools.
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "services.mcp", "--transport", "streamable-http"),
        *("--port", str(port)),
        cwd=REPO_ROOT,
        env={**stack.env(), **env},
    )
    try:
        tx = await _over_http(f"http://127.0.0.1:{port}/mcp", server)
        assert tx["status"] == "committed"
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), timeout=10)


async def _over_http(url: str, server: asyncio.subprocess.Process) -> dict[str, Any]:
    # Importing the MCP SDK on a loaded 2-core machine has taken over 30 s.
    deadline = time.monotonic() + 90
    while True:
        assert server.returncode is None, "the streamable HTTP server exited"
        try:
            async with Client(url) as client:
                return _structured(await client.call_tool("get_transaction", {"tx_id": "mcp-1"}))
        except Exception:
            # Not listening yet: the process is still importing.
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
