"""One server span per `/v1` request, under the trace context the caller sent
(`traceparent`), so what the request produces to Kafka carries it on (services.tracing;
with tracing off and no context sent, no span: it would record and pass on nothing);
and every request's count and duration by method, route template and status
(services.metrics). A plain ASGI wrapper: no body is read and nothing is buffered."""

import time
from collections.abc import Callable

from opentelemetry.trace import SpanKind
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services import tracing
from services.logging_json import log_context
from services.metrics import HTTP_REQUEST_SECONDS, HTTP_REQUESTS, labelled

# A path no route matched is counted under this, not under itself: a scanner trying
# thousands of paths must not make thousands of series.
UNMATCHED = "unmatched"


def _route(scope: Scope) -> str:
    # Starlette's router leaves the matched route in the scope it was handed.
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class RequestSpan:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        method: str = scope["method"]
        status = 500  # what the client sees if the app raises before answering

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        began = time.perf_counter()
        try:
            if path.startswith("/v1/"):
                await self._traced(scope, receive, sending, method, path, lambda: status)
            else:
                await self.app(scope, receive, sending)
        finally:
            route = _route(scope)
            labelled(HTTP_REQUESTS, method, route, str(status)).inc()
            labelled(HTTP_REQUEST_SECONDS, method, route).observe(time.perf_counter() - began)

    async def _traced(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        method: str,
        path: str,
        status: Callable[[], int],
    ) -> None:
        headers = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope.get("headers", ())
            if k in (b"traceparent", b"tracestate")
        }
        parent = tracing.context_from_http(headers)
        if parent is None and not tracing.recording():
            # Such a span would record nothing and pass nothing on, and it cost ~0.1 ms a
            # request (issue 24): only the log context it would have scoped (ids bound
            # inside, services.tracing.annotate, end with the request).
            with log_context():
                await self.app(scope, receive, send)
            return
        with tracing.span(
            f"intake {method} {path}",
            parent,
            SpanKind.SERVER,
            semantic={"http.request.method": method, "url.path": path, "url.scheme": "http"},
        ) as span:
            try:
                await self.app(scope, receive, send)
            finally:
                route = _route(scope)
                if route != UNMATCHED:
                    span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status())
