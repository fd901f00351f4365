"""The HTTP client recon calls providers with.

aiohttp, not httpx: the dispatcher makes every provider call of every transaction, and
httpx (httpcore over anyio) spent 1.4-1.9 ms of CPU per request where aiohttp spends
0.3 ms (measured on the sandbox provider, 1500 POSTs at concurrency 30); at three calls
per transaction that was the dispatcher's largest cost (issue 13).

Any failure to get an answer (refused, reset, a timeout, a broken response) is one error,
ProviderUnreachable: to the caller it only means the provider's answer is unknown.
"""

import json
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlsplit

from opentelemetry.trace import SpanKind

from events.safe_json import escaped_of
from services import tracing

# Below the keep-alive of common servers (uvicorn's default is 5 s): a connection the
# provider is closing at the moment it is reused fails the request, which would turn a
# call into an unknown outcome and a lookup.
KEEP_ALIVE_S = 2.0

# The largest answer read from a provider. An answer becomes evidence in an observation,
# and the decider refuses records over 512 KiB (services.decider.runtime): a larger one
# is not read at all, and the outcome is unknown (a lookup settles it), rather than an
# observation that could never be decided.
MAX_ANSWER_BYTES = 256 * 1024


class ProviderUnreachable(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    # The answer's headers, names lower-cased (a 429's `retry-after`).
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        """The body as JSON; a body that is not JSON becomes `{"text": ...}`, evidence of
        what came back rather than an error."""
        # Escaped, not trusted: a provider's lone surrogate must become evidence in the
        # observation, not an observation that cannot be encoded (a crash, then a crash
        # loop on redelivery).
        try:
            return escaped_of(self.body, json.loads(self.body))
        except ValueError:
            # Decoded with replacement characters: always encodable.
            return {"text": self.body.decode("utf-8", "replace")[:2000]}


class Requester(Protocol):
    async def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        data: str | None = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """`json`: a JSON body; `data`: a body already encoded (a form), whose
        Content-Type the caller sets."""
        ...


class ProviderHttp:
    """One connection pool for the life of a process (`async with`); every request
    waits at most `timeout_s` for a connection and again for each read, and at most
    `connect_s` to connect (as httpx's per-phase timeouts did)."""

    def __init__(self, timeout_s: float, connect_s: float | None = None) -> None:
        # Imported here, by the processes that call providers: the others reach this module
        # through the adapters' types (the Kafka intents reader through the policy's catalog),
        # and aiohttp was ~0.26 s of CPU at their start.
        import aiohttp

        # Any failure to get an answer: aiohttp's InvalidURL and a header it cannot encode
        # are ValueErrors.
        self._unreachable = (TimeoutError, aiohttp.ClientError, OSError, ValueError)
        self.timeout = aiohttp.ClientTimeout(
            total=None,
            connect=timeout_s,
            sock_connect=min(connect_s or timeout_s, timeout_s),
            sock_read=timeout_s,
        )
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "ProviderHttp":
        import aiohttp

        self._session = aiohttp.ClientSession(
            timeout=self.timeout,
            connector=aiohttp.TCPConnector(limit=100, keepalive_timeout=KEEP_ALIVE_S),
        )
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        data: str | None = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        assert self._session is not None, "use ProviderHttp as `async with`"
        where = urlsplit(url)
        semantic: dict[str, str | int] = {
            "http.request.method": method,
            "url.full": f"{where.scheme}://{where.netloc}{where.path}",  # no query: keys
            "server.address": where.hostname or "",
            "server.port": where.port or (443 if where.scheme == "https" else 80),
        }
        # One client span per call to a provider (http.* semantic conventions), inside the
        # dispatcher's or reconciler's span of the operation.
        with tracing.span(method, kind=SpanKind.CLIENT, semantic=semantic) as span:
            # The provider's record of the call names this span (services.tracing).
            headers = {**(headers or {}), **tracing.http_headers()}
            try:
                async with self._session.request(
                    method, url, json=json, data=data, params=params, headers=headers
                ) as response:
                    span.set_attribute("http.response.status_code", response.status)
                    body = bytearray()
                    async for chunk in response.content.iter_any():
                        body += chunk
                        if len(body) > MAX_ANSWER_BYTES:
                            raise ValueError(f"answer over {MAX_ANSWER_BYTES} bytes")
                    return Answer(
                        response.status,
                        bytes(body),
                        {k.lower(): v for k, v in response.headers.items()},
                    )
            except self._unreachable as error:
                span.set_attribute("error.type", type(error).__name__)
                raise ProviderUnreachable(error) from error
