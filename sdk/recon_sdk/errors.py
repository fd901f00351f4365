"""Every refusal of the API as a typed exception carrying the API's own `error` code.

The intake answers every refusal with `{"error": "<code>", "message": "..."}`; the
exception class says what kind of refusal it is (by HTTP status), `code` says exactly
which one (e.g. `tx_conflict`, `already_committed`, `review_already_resolved`).
"""

from typing import Any

# Refusals that say "not yet": the same request, sent again after `retry_after`, may be
# answered otherwise, and sending it again changes nothing twice.
RETRY_LATER_CODES = frozenset(
    {"unavailable", "unreachable", "tx_pending", "intent_pending", "resolution_pending"}
)


class ReconError(Exception):
    """A refusal from the recon API (or the client giving up on one).

    `retry_safe`: the same request may be sent again as it is (after `retry_after` seconds,
    when the API said), and nothing happens twice; false means change something first.
    `trace_id`: the W3C trace id the client sent with the request (its `traceparent`), the
    id to find the request in recon's logs and traces.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        body: Any = None,
        *,
        retry_after: float | None = None,
        trace_id: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        self.retry_after = retry_after
        self.trace_id = trace_id

    @property
    def retry_safe(self) -> bool:
        return self.status == 503 or self.code in RETRY_LATER_CODES


class InvalidRequest(ReconError):
    """400/422: the request is malformed or invalid; nothing was recorded."""


class Unauthorized(ReconError):
    """401: missing or unknown API key."""


class Forbidden(ReconError):
    """403: the API key may not do this (e.g. `not_granted`, an agent key resolving)."""


class NotFound(ReconError):
    """404: no such resource for this key's tenant (another tenant's looks the same)."""


class Conflict(ReconError):
    """409: conflicts with what was recorded (`tx_conflict`, `tx_pending`,
    `already_committed`, `review_already_resolved`, `resolution_pending`, ...)."""

    @property
    def duplicate_of(self) -> dict[str, Any] | None:
        """For `duplicate_intent`: the transaction holding the step's natural key (`tx_id`,
        `action`, `status`, `operation`, `natural_key`); follow it instead of resubmitting."""
        found = self.body.get("duplicate_of") if isinstance(self.body, dict) else None
        return found if isinstance(found, dict) else None


class PayloadTooLarge(ReconError):
    """413 `body_too_large`: nothing was recorded."""


class Unavailable(ReconError):
    """503 (or the intake could not be reached): nothing was accepted; the same request
    may be sent again."""


class WaitTimeout(ReconError):
    """The transaction did not reach the awaited state in time (not an API answer:
    `status` is 0, `last` is the transaction as last seen, if any)."""

    def __init__(self, tx_id: str, timeout: float, last: Any) -> None:
        super().__init__(
            0,
            "wait_timeout",
            f"transaction {tx_id!r} not settled after {timeout}s (last status: "
            f"{getattr(last, 'status', None)!r})",
            last,
        )
        self.last = last


_BY_STATUS: dict[int, type[ReconError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
    503: Unavailable,
}


def error_for(
    status: int, body: Any, *, retry_after: float | None = None, trace_id: str | None = None
) -> ReconError:
    """The exception for a non-2xx answer; a body without the API's shape (a proxy's
    page, say) still yields an exception, with code `http_<status>`."""
    code, message = f"http_{status}", ""
    if isinstance(body, dict):
        code = str(body.get("error") or code)
        message = str(body.get("message") or "")
    elif isinstance(body, str):
        message = body[:500]
    cls = _BY_STATUS.get(status, ReconError)
    return cls(status, code, message, body, retry_after=retry_after, trace_id=trace_id)
