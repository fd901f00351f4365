"""The MCP server's settings, from the environment (README, "MCP server")."""

import os
from dataclasses import dataclass


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class McpSettings:
    intake_url: str
    # Never a tool argument: a model that could choose the key could choose the tenant.
    api_key: str
    # RECON_MCP_AGENT_ID: the agent every submission names, whatever the model wrote in
    # `agent_id` (grants and quotas key on it). The intake also refuses an agent the key
    # does not speak for (RECON_API_KEYS "key=tenant:agent").
    agent_id: str | None = None


def load_mcp_settings(env: dict[str, str] | None = None) -> McpSettings:
    env = dict(os.environ) if env is None else env
    key = env.get("RECON_MCP_API_KEY", "").strip()
    if not key:
        raise ConfigError("RECON_MCP_API_KEY is not set: the API key the MCP server acts with")
    url = env.get("RECON_MCP_INTAKE_URL", "").strip() or "http://127.0.0.1:8080"
    agent = env.get("RECON_MCP_AGENT_ID", "").strip() or None
    return McpSettings(intake_url=url.rstrip("/"), api_key=key, agent_id=agent)
