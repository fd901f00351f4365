"""The MCP server (`recon-mcp`, `python -m services.mcp`) driven by the MCP client library, end
to end on the real stack: over stdio an agent lists the operations, submits a transaction
without naming a tx_id or an agent, waits for it to commit, and is refused honestly (a
destructive operation through the non-destructive tool, by its input schema generated from
the catalog, a re-planned duplicate naming the first transaction); over streamable HTTP the
same tools answer with the bearer token and nothing answers without it. The API key, the
agent and the session are the server's environment, never a tool argument.

One stack for the module (support.stack_fixtures.module_stack): the second test only starts
a server that must refuse to run, so the first test's transaction (its tx_id derived, its
natural key mcp-order-1) and its empty review list are the module's alone."""

import asyncio
import copy
import json
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult, TextContent
from support.stack_fixtures import module_stack

from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack
from services.intake.example import example_transaction

stack = module_stack

READ_ONLY = {
    "get_transaction",
    "wait_for_transaction",
    "list_operations",
    "list_reviews",
    "preview",
}
DESTRUCTIVE = {"submit_destructive_transaction", "abort_transaction"}
TOKEN = "mcp-http-token"


def _text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


def _structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    content: dict[str, Any] = result.structured_content
    return content


def offered(schema: dict[str, Any]) -> set[tuple[str, str]]:
    """The (provider, operation) of every step branch a submit tool's input schema offers."""
    props = [d["properties"] for d in schema["$defs"].values() if "properties" in d]
    return {
        (p["provider"]["const"], p["operation"]["const"])
        for p in props
        if "const" in p.get("operation", {})
    }


def as_model_writes(tx: dict[str, Any]) -> dict[str, Any]:
    """The transaction without what the server decides (tx_id, agent)."""
    body = copy.deepcopy(tx)
    del body["tx_id"], body["agent_id"]
    return body


async def test_an_agent_commits_a_transaction_through_the_mcp_server(
    stack: Stack, free_port: Callable[[], int]
) -> None:
    env = {
        "RECON_MCP_API_KEY": "demo-key",
        "RECON_MCP_INTAKE_URL": stack.intake_url,
        "RECON_MCP_AGENT_ID": "agent-7",
    }
    # The console script the SDK installs (`pip install "./sdk[mcp]"`), not the checkout.
    script = shutil.which("recon-mcp", path=str(REPO_ROOT / ".venv" / "bin"))
    assert script is not None, "the SDK's recon-mcp console script is not installed"
    params = StdioServerParameters(command=script, args=[], env=env, cwd="/")
    async with Client(params) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == READ_ONLY | DESTRUCTIVE | {"submit_transaction"}
        for name, tool in tools.items():
            assert tool.annotations is not None
            assert tool.annotations.read_only_hint is (name in READ_ONLY), name
            if name not in READ_ONLY:
                assert tool.annotations.destructive_hint is (name in DESTRUCTIVE), name
            assert tool.output_schema, f"{name} has no output schema"
            # Configuration, not arguments: no tool lets the model name a key, a tenant,
            # an agent or a session.
            schema = json.dumps(tool.input_schema).lower()
            for chosen_by_the_server in ("api_key", "tenant", "agent_id", "session_id"):
                assert chosen_by_the_server not in schema, (name, chosen_by_the_server)

        catalog = _structured(await client.call_tool("list_operations", {}))
        classes = {(o["provider"], o["operation"]): o["class"] for o in catalog["operations"]}
        assert classes["sandbox", "records.delete"] == "destructive", catalog
        # The submit tools' inputs are the catalog's operations, split by class.
        safe = offered(tools["submit_transaction"].input_schema)
        assert safe == {op for op, cls in classes.items() if cls != "destructive"}
        assert offered(tools["submit_destructive_transaction"].input_schema) == set(classes)

        body = as_model_writes(example_transaction("ignored"))
        body["steps"][1]["natural_key"] = "mcp-order-1"
        accepted = _structured(await client.call_tool("submit_transaction", {"transaction": body}))
        tx_id = accepted["tx_id"]
        assert tx_id.startswith("mcp-"), accepted
        # The same transaction again derives the same tx_id: one intent.
        again = _structured(await client.call_tool("submit_transaction", {"transaction": body}))
        assert again["tx_id"] == tx_id
        outcome = _structured(
            await client.call_tool("wait_for_transaction", {"tx_id": tx_id, "timeout_s": 60})
        )
        assert outcome["transaction"]["status"] == "committed", outcome
        assert outcome["settled"] and not outcome["needs_person"]
        assert outcome["transaction"]["agent_id"] == "agent-7"

        # A re-planned duplicate (other wording of the email, same order): refused, named.
        replanned = copy.deepcopy(body)
        replanned["on_commit"][0]["payload"]["template"] = "receipt-v2"
        duplicate = await client.call_tool("submit_transaction", {"transaction": replanned})
        assert duplicate.is_error and "duplicate_intent: " in _text(duplicate), _text(duplicate)
        assert tx_id in _text(duplicate)

        delete = {
            "steps": [
                {
                    "action": "delete",
                    "provider": "sandbox",
                    "operation": "records.delete",
                    "payload": {"record": "r-1"},
                }
            ]
        }
        refused = await client.call_tool("submit_transaction", {"transaction": delete})
        assert refused.is_error and "operation_not_offered" in _text(refused), _text(refused)
        assert "submit_destructive_transaction" in _text(refused)
        unknown = copy.deepcopy(delete)
        unknown["steps"][0]["operation"] = "records.shred"
        refused = await client.call_tool("submit_destructive_transaction", {"transaction": unknown})
        assert refused.is_error and "operation_not_offered" in _text(refused), _text(refused)
        chosen = await client.call_tool(
            "submit_transaction", {"transaction": {**body, "agent_id": "someone-else"}}
        )
        assert chosen.is_error, "the model named an agent and was not refused"
        late = await client.call_tool("abort_transaction", {"tx_id": tx_id})
        assert late.is_error and "already_committed: " in _text(late), _text(late)
        reviews = _structured(await client.call_tool("list_reviews", {}))
        assert reviews == {"reviews": []}
        preview = await client.call_tool("preview", {"transaction": body})
        assert not preview.is_error, _text(preview)

    # A client of the previous protocol revision (the initialize handshake) gets the same
    # tools and answers as the current one (negotiated by server/discover above).
    async with Client(params) as current, Client(params, mode="legacy") as previous:
        assert current.protocol_version != previous.protocol_version
        for client in (current, previous):
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == READ_ONLY | DESTRUCTIVE | {"submit_transaction"}
            tx = _structured(await client.call_tool("get_transaction", {"tx_id": tx_id}))
            assert tx["status"] == "committed"

    # Streamable HTTP: the same server behind a bearer token.
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "services.mcp", "--transport", "streamable-http"),
        *("--port", str(port)),
        cwd=REPO_ROOT,
        env={**stack.env(), **env, "RECON_MCP_HTTP_TOKEN": TOKEN},
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        tx = await _over_http(url, server, tx_id)
        assert tx["status"] == "committed"
        async with httpx.AsyncClient() as http:
            hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            bare = await http.post(url, json=hello)
            assert bare.status_code == 401, bare.text
            wrong = await http.post(url, json=hello, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401, wrong.text
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), timeout=10)


async def test_the_http_transport_does_not_start_without_a_token(stack: Stack) -> None:
    env = {"RECON_MCP_API_KEY": "demo-key", "RECON_MCP_INTAKE_URL": stack.intake_url}
    started = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "services.mcp", "--transport", "streamable-http"),
        cwd=REPO_ROOT,
        env={**stack.env(), **env},
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(started.communicate(), timeout=60)
    assert started.returncode == 2 and b"RECON_MCP_HTTP_TOKEN" in err


async def _over_http(url: str, server: asyncio.subprocess.Process, tx_id: str) -> dict[str, Any]:
    # Importing the MCP SDK on a loaded 2-core machine has taken over 30 s.
    deadline = time.monotonic() + 90
    while True:
        assert server.returncode is None, "the streamable HTTP server exited"
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        try:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return _structured(await client.call_tool("get_transaction", {"tx_id": tx_id}))
        except Exception:
            # Not listening yet: the process is still importing.
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
