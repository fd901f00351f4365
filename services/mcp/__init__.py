"""The MCP server (`python -m services.mcp`): recon's intake API as tools any MCP-capable
agent can call (submit, read, preview, abort, list reviews), over stdio or streamable HTTP.

It is a client of the intake (through the Python SDK, `recon_sdk`), not a recon process:
it reads no topic and no table. Its tools' input schemas are the intake's own request
models (services.intake.submission, services.intake.abort), so the two cannot disagree.
The API key is the server's configuration (RECON_MCP_API_KEY), never a tool argument.
"""
