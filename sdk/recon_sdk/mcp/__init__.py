"""recon's MCP server (`recon-mcp`, or `python -m recon_sdk.mcp`): the intake API as tools an
MCP-capable agent calls, over stdio or streamable HTTP. Installed with the SDK alone
(`pip install "./sdk[mcp]"`): it is a client of the intake through `recon_sdk`, imports
nothing of recon's server (no FastAPI, Kafka or Postgres driver) and reads no topic or table.

What the model may not choose is the server's configuration (recon_sdk.mcp.config): the API
key (the tenant), the agent and its session; the tx_id is derived when the model names none.
"""
