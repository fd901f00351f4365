"""The MCP submit tools' input schemas are generated from the catalog (`GET /v1/catalog`, read
when the server starts): each step is one of the catalog's operations with its declared
payload schema, and submit_transaction offers read and write operations only, so a
destructive one is refused by the schema before any call to the intake."""

import json
from typing import Any

import pytest
from mcp import Client
from recon_sdk.mcp.__main__ import main
from recon_sdk.mcp.config import McpSettings
from recon_sdk.mcp.tools import build_server
from recon_sdk.models import CatalogEntry

MAIL_SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string", "format": "email"}},
    "required": ["to"],
    "additionalProperties": False,
}
FAKE = [
    CatalogEntry.model_validate(entry)
    for entry in (
        {
            "provider": "mailer",
            "operation": "mail.send",
            "class": "write",
            "reversibility": "irreversible",
            "payload_schema": MAIL_SCHEMA,
        },
        {"provider": "crm", "operation": "contact.read", "class": "read", "reversibility": "none"},
        {
            "provider": "crm",
            "operation": "contact.erase",
            "class": "destructive",
            "reversibility": "irreversible",
        },
    )
]
# Nothing listens there: a call that reached the intake would fail as unreachable.
SETTINGS = McpSettings(intake_url="http://127.0.0.1:9", api_key="k")


def offered(schema: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(provider, operation) -> payload schema of every step branch of a tool's input."""
    steps = {
        name: d
        for name, d in schema["$defs"].items()
        if "const" in d["properties"].get("operation", {})
    }
    return {
        (d["properties"]["provider"]["const"], d["properties"]["operation"]["const"]): d[
            "properties"
        ]["payload"]
        for d in steps.values()
    }


async def test_the_submit_tools_offer_the_catalogs_operations_by_class() -> None:
    async with Client(build_server(SETTINGS, FAKE)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        safe = offered(tools["submit_transaction"].input_schema)
        assert set(safe) == {("mailer", "mail.send"), ("crm", "contact.read")}
        # The provider's declared payload schema is what the model reads.
        assert {k: v for k, v in safe["mailer", "mail.send"].items() if k != "title"} == (
            MAIL_SCHEMA
        )
        every = offered(tools["submit_destructive_transaction"].input_schema)
        assert set(every) == set(safe) | {("crm", "contact.erase")}
        assert set(offered(tools["preview"].input_schema)) == set(every)
        steps = tools["submit_transaction"].input_schema["$defs"]["SafeTransaction"]
        assert "oneOf" in json.dumps(steps["properties"]["steps"])

        erase = {"action": "erase", "provider": "crm", "operation": "contact.erase"}
        for step in (
            {**erase, "payload": {}},
            # Unknown to the catalog, and a known operation under another provider.
            {**erase, "operation": "contact.merge", "payload": {}},
            {**erase, "provider": "mailer", "operation": "contact.read", "payload": {}},
        ):
            refused = await client.call_tool(
                "submit_transaction", {"transaction": {"steps": [step]}}
            )
            assert refused.is_error, step
            text = " ".join(getattr(c, "text", "") for c in refused.content)
            assert "operation_not_offered" in text and "submit_destructive_transaction" in text
            # Refused by the schema: the unreachable intake was never called.
            assert "unreachable" not in text, text


def test_the_server_does_not_start_without_the_catalog(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RECON_MCP_API_KEY", "k")
    monkeypatch.setenv("RECON_MCP_INTAKE_URL", SETTINGS.intake_url)
    assert main([]) == 3
    assert "cannot read the catalog from http://127.0.0.1:9 (GET /v1/catalog)" in (
        capsys.readouterr().err
    )
