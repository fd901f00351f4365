"""`python -m services.mcp`: recon's MCP server from a checkout, the same as `recon-mcp`.

The server itself lives in the SDK package (recon_sdk.mcp) so that it installs and runs
without recon's server code (`pip install "./sdk[mcp]"`); this module only keeps the
checkout's command working.
"""
