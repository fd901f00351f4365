"""One server span per `/v1` request, under the trace context the caller sent
(`traceparent`), so what the request produces to Kafka carries it on (services.tracing).
A plain ASGI wrapper: no body is read and nothing is buffered."""

from opentelemetry.trace import SpanKind
from starlette.types import ASGIApp, Receive, Scope, Send

from services import tracing


class RequestSpan:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        headers = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope.get("headers", ())
            if k in (b"traceparent", b"tracestate")
        }
        with tracing.span(
            f"intake {scope['method']} {path}",
            tracing.context_from_http(headers),
            SpanKind.SERVER,
        ):
            await self.app(scope, receive, send)
