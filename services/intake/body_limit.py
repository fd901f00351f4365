"""A cap on the size of every `/v1` request body, enforced at the edge (issue 7, items 1, 11).

The intake parses bodies itself (after authentication), so without a cap one request can
make it hold any amount of memory, and the webhook ingress (no API key) would do so for
anyone. This ASGI middleware sits in front of every route and refuses with
`413 {"error": "body_too_large"}`:

- at once when `Content-Length` declares more than the limit (nothing is read);
- otherwise as soon as the bytes received pass the limit (a chunked body is counted as it
  arrives and never read further), so no handler ever sees, let alone records, it.

Webhooks have their own, smaller limit: a provider's notice of one effect is small.
"""

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

WEBHOOK_PREFIX = "/v1/webhooks/"


class BodyTooLarge(Exception):
    """Raised from `receive` once the body has passed its limit; turned into the 413."""


class BodyLimit:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, webhook_max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.webhook_max_body_bytes = webhook_max_body_bytes

    def limit_for(self, path: str) -> int | None:
        if path.startswith(WEBHOOK_PREFIX):
            return self.webhook_max_body_bytes
        if path.startswith("/v1/"):
            return self.max_body_bytes
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limit_for(scope.get("path", "")) if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, limit, scope["path"])
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge
            return message

        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, tracking)
        except BodyTooLarge:
            # Handlers read the whole body before they answer, so nothing was sent yet.
            if started:
                raise
            await _refuse(send, limit, scope["path"])


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed one before we see it
    return None


async def _refuse(send: Send, limit: int, path: str) -> None:
    what = "a webhook delivery" if path.startswith(WEBHOOK_PREFIX) else "a request body"
    body = json.dumps(
        {
            "error": "body_too_large",
            "message": f"{what} may hold at most {limit} bytes; nothing was recorded",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                # The rest of the body is never read, so the connection cannot be reused.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
