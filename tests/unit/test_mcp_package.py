"""The MCP server runs from the SDK package alone (`pip install "./sdk[mcp]"`, `recon-mcp`):
importing it loads nothing of recon's server (FastAPI, Kafka, Postgres drivers, the project's
own modules), and what the model may not choose is not in any tool's input."""

import json
import subprocess
import sys

from recon_sdk.mcp.config import load_mcp_settings
from recon_sdk.mcp.models import McpTransaction
from recon_sdk.tx_ids import stable_tx_id

SERVER_ONLY = ("fastapi", "aiokafka", "asyncpg", "services", "events", "projections")


def test_the_mcp_server_imports_nothing_of_the_server() -> None:
    probe = (
        "import sys, recon_sdk.mcp.tools, recon_sdk.mcp.__main__, recon_sdk.mcp.http_auth; "
        f"print([m for m in sys.modules if m.split('.')[0] in {SERVER_ONLY!r}])"
    )
    # -I: no current directory on the path, so a checkout's packages are not found by accident.
    found = subprocess.run(
        [sys.executable, "-I", "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    assert found.stdout.strip() == "[]", found.stdout


def test_the_tx_id_is_derived_from_the_transaction_and_the_configured_session() -> None:
    steps = [{"action": "a", "provider": "sandbox", "operation": "email.send", "payload": {}}]
    tx = McpTransaction.model_validate({"steps": steps})
    body = tx.body("agent-7", None)
    assert body["agent_id"] == "agent-7" and "session_id" not in body
    assert body["tx_id"] == tx.body("agent-7", None)["tx_id"]
    assert body["tx_id"] != tx.body("agent-8", None)["tx_id"]
    assert body["tx_id"] != tx.body("agent-7", "s-2")["tx_id"]
    fields = {"steps": steps}
    expected = stable_tx_id(
        "agent-7/default", json.dumps(fields, sort_keys=True, separators=(",", ":")), prefix="mcp"
    )
    assert body["tx_id"] == expected
    named = McpTransaction.model_validate({"tx_id": "order-9", "steps": steps})
    assert named.body("agent-7", None)["tx_id"] == "order-9"


def test_the_configured_task_is_carried_and_the_model_cannot_name_one() -> None:
    steps = [{"action": "a", "provider": "sandbox", "operation": "email.send", "payload": {}}]
    tx = McpTransaction.model_validate({"steps": steps})
    assert "task_id" not in tx.body("agent-7", None)
    under = tx.body("agent-7", None, "order-42")
    assert under["task_id"] == "order-42"
    # Another task is another authority: another intent, not a conflicting resubmission.
    assert under["tx_id"] != tx.body("agent-7", None)["tx_id"]
    assert "task_id" not in McpTransaction.model_json_schema()["properties"]
    settings = load_mcp_settings({"RECON_MCP_API_KEY": "k", "RECON_MCP_TASK_ID": "order-42"})
    assert settings.task_id == "order-42"
