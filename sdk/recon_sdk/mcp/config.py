"""The MCP server's settings, from the environment (docs/agents.md, "MCP server")."""

import os
from dataclasses import dataclass

DEFAULT_AGENT = "mcp-agent"


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class McpSettings:
    intake_url: str
    # Never a tool argument: a model that could choose the key could choose the tenant.
    api_key: str
    # The agent every submission names (grants and quotas key on it); bind the key to it
    # in RECON_API_KEYS ("key=tenant:agent") so the intake refuses any other.
    agent_id: str = DEFAULT_AGENT
    # The agent session that owns this server's submissions; None: recon's default
    # (`<agent_id>:default`).
    session_id: str | None = None
    # The task every submission acts under (least privilege per task): its grant in the
    # policy document bounds what this server's model may ask for. Configuration, never a
    # tool argument: a model that could name the task could pick a wider one.
    task_id: str | None = None
    # The bearer token every request of the streamable HTTP transport must carry; the HTTP
    # transport does not start without one (anyone who reaches the port would act with the
    # API key).
    http_token: str | None = None


def load_mcp_settings(env: dict[str, str] | None = None) -> McpSettings:
    env = dict(os.environ) if env is None else env
    key = env.get("RECON_MCP_API_KEY", "").strip()
    if not key:
        raise ConfigError("RECON_MCP_API_KEY is not set: the API key the MCP server acts with")
    url = env.get("RECON_MCP_INTAKE_URL", "").strip() or "http://127.0.0.1:8080"
    return McpSettings(
        intake_url=url.rstrip("/"),
        api_key=key,
        agent_id=env.get("RECON_MCP_AGENT_ID", "").strip() or DEFAULT_AGENT,
        session_id=env.get("RECON_MCP_SESSION_ID", "").strip() or None,
        task_id=env.get("RECON_MCP_TASK_ID", "").strip() or None,
        http_token=env.get("RECON_MCP_HTTP_TOKEN", "").strip() or None,
    )
