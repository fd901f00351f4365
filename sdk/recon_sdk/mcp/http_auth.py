"""Bearer authentication in front of the streamable HTTP transport: the MCP server acts with
the deployment's API key, so whoever reaches its port must prove they may use it."""

import hmac
import json
from typing import Any

Scope = dict[str, Any]


class BearerAuth:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` gets 401 and
    never reaches the MCP app (lifespan events pass through, so the app starts and stops)."""

    def __init__(self, app: Any, token: str) -> None:
        if not token:
            raise ValueError("an empty bearer token would let anyone in")
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self._allowed(scope):
            body = json.dumps(
                {"error": "unauthorized", "message": "send Authorization: Bearer <token>"}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="recon-mcp"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self._app(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                given = value
        # Constant time: the comparison must not tell an attacker how much was right.
        return hmac.compare_digest(given, self._expected)
