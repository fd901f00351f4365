"""What each API call sends and how its answer is read: shared by the sync and the async
client, which differ only in how they wait (I/O and sleeping).

`idempotent` marks the calls the client may send again after a 503 or a lost connection:
reads, and a submission (the same `tx_id` with the same body is the same intent, answered
with the same op keys, and nothing new happens). Aborts and resolutions are not resent
automatically: the caller decides.
"""

import email.utils
import json
import random
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from recon_sdk.errors import ReconError, error_for
from recon_sdk.models import Owner, TransactionRequest


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    idempotent: bool = False


def _seg(value: str) -> str:
    # An id is one path segment, whatever it contains.
    return quote(value, safe="")


def submission_body(tx: TransactionRequest | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(tx, TransactionRequest):
        return tx.body()
    return dict(tx)


def submit(tx: TransactionRequest | Mapping[str, Any]) -> Call:
    return Call("POST", "/v1/transactions", json=submission_body(tx), idempotent=True)


def get_transaction(tx_id: str) -> Call:
    return Call("GET", f"/v1/transactions/{_seg(tx_id)}", idempotent=True)


def _given(**params: Any) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def get_events(tx_id: str, cursor: str | None = None) -> Call:
    params = _given(cursor=cursor)
    return Call("GET", f"/v1/transactions/{_seg(tx_id)}/events", params=params, idempotent=True)


def get_receipt(tx_id: str) -> Call:
    return Call("GET", f"/v1/transactions/{_seg(tx_id)}/receipt", idempotent=True)


def list_transactions(filters: Mapping[str, Any], limit: int | None, cursor: str | None) -> Call:
    params = _given(**filters, limit=limit, cursor=cursor)
    return Call("GET", "/v1/transactions", params=params, idempotent=True)


def list_drift(cursor: str | None = None) -> Call:
    return Call("GET", "/v1/drift", params=_given(cursor=cursor), idempotent=True)


def next_page(body: Any) -> str | None:
    """The cursor of the page after this answer's; None on the last page (and from a recon
    older than pages, which answered every row at once)."""
    cursor = body.get("next_cursor") if isinstance(body, dict) else None
    return cursor if isinstance(cursor, str) else None


def abort(tx_id: str, reason: str | None, actor: str | None, owner: Owner | None = None) -> Call:
    body: dict[str, Any] = {
        k: v for k, v in (("reason", reason), ("actor", actor)) if v is not None
    }
    if owner is not None:
        # An agent's abort names its session and proves it (recon refuses one without).
        body.update(owner.model_dump(include={"agent_id", "session_id", "owner_token"}))
    return Call("POST", f"/v1/transactions/{_seg(tx_id)}/abort", json=body or None)


def list_reviews(state: str | None, older_than_s: int | None, cursor: str | None = None) -> Call:
    params = _given(state=state, older_than_s=older_than_s, cursor=cursor)
    return Call("GET", "/v1/reviews", params=params, idempotent=True)


def get_review(review_id: str) -> Call:
    return Call("GET", f"/v1/reviews/{_seg(review_id)}", idempotent=True)


def resolve_review(review_id: str, resolution: str, note: str, actor: str | None) -> Call:
    # The resolver is the operator key's person; `actor` is only sent by old callers.
    body = {"resolution": resolution, "note": note}
    if actor is not None:
        body["actor"] = actor
    return Call("POST", f"/v1/reviews/{_seg(review_id)}/resolve", json=body)


def get_operation(op_key: str) -> Call:
    return Call("GET", f"/v1/operations/{_seg(op_key)}", idempotent=True)


def preview(tx: TransactionRequest | Mapping[str, Any]) -> Call:
    # A preview records nothing, so it may be sent again.
    return Call("POST", "/v1/previews", json=submission_body(tx), idempotent=True)


def approve(tx_id: str, action: str, digest: str, expires_in_s: int | None) -> Call:
    body: dict[str, Any] = {"tx_id": tx_id, "action": action, "digest": digest}
    if expires_in_s is not None:
        body["expires_in_s"] = expires_in_s
    return Call("POST", "/v1/approvals", json=body)


def reject_approval(approval_id: str) -> Call:
    return Call("POST", f"/v1/approvals/{_seg(approval_id)}/reject")


def claim(tx_id: str, owner: Owner | Mapping[str, str]) -> Call:
    # Not resent: a second claim of a lapsed lease is a new succession.
    return Call("POST", f"/v1/transactions/{_seg(tx_id)}/claim", json=_session(owner))


def release(tx_id: str, owner: Owner | Mapping[str, str]) -> Call:
    return Call("POST", f"/v1/transactions/{_seg(tx_id)}/release", json=_session(owner))


def request_review(
    tx_id: str, owner: Owner | Mapping[str, str], action: str, reason: str | None
) -> Call:
    body = {**_session(owner), "action": action}
    if reason is not None:
        body["reason"] = reason
    return Call("POST", f"/v1/transactions/{_seg(tx_id)}/review", json=body)


def _session(owner: Owner | Mapping[str, str]) -> dict[str, Any]:
    found = owner.model_dump() if isinstance(owner, Owner) else dict(owner)
    return {k: found[k] for k in ("agent_id", "session_id", "owner_token") if found.get(k)}


def catalog() -> Call:
    return Call("GET", "/v1/catalog", idempotent=True)


def get_policy() -> Call:
    return Call("GET", "/v1/policy", idempotent=True)


def put_policy(document: Mapping[str, Any]) -> Call:
    # Versioned (a stale `version` is refused 409): the same document twice is refused, not
    # applied twice, but the caller decides whether to send it again.
    return Call("PUT", "/v1/policy", json=dict(document))


def get_quotas() -> Call:
    return Call("GET", "/v1/quotas", idempotent=True)


def reset_breaker(agent_id: str, operation: str) -> Call:
    body = {"agent_id": agent_id, "operation": operation}
    return Call("POST", "/v1/quotas/breakers/reset", json=body)


def list_kill_switches() -> Call:
    return Call("GET", "/v1/kill-switches", idempotent=True)


def engage_kill_switch(scope: Mapping[str, str], reason: str) -> Call:
    return Call("POST", "/v1/kill-switches", json={"scope": dict(scope), "reason": reason})


def release_kill_switch(switch_id: str) -> Call:
    # Releasing a released switch changes nothing: safe to resend.
    return Call("DELETE", f"/v1/kill-switches/{_seg(switch_id)}", idempotent=True)


def traceparent() -> tuple[str, str]:
    """A fresh W3C trace context for one call (kept across its resends): the header, and
    the trace id that errors carry so a person can find the request in recon's traces."""
    trace_id = secrets.token_hex(16)
    return f"00-{trace_id}-{secrets.token_hex(8)}-01", trace_id


def answer(
    status: int,
    content: bytes,
    headers: Mapping[str, str] | None = None,
    trace_id: str | None = None,
) -> Any:
    """The decoded 2xx body, or the typed exception for a refusal."""
    try:
        body: Any = json.loads(content) if content else None
    except ValueError:
        body = content.decode("utf-8", "replace")
    if status >= 300:
        wait = retry_after((headers or {}).get("retry-after"))
        raise error_for(status, body, retry_after=wait, trace_id=trace_id)
    return body


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After in seconds: a number of seconds or an HTTP date (RFC 9110)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


# The longest wait the client accepts from a server's Retry-After before resending.
MAX_RETRY_AFTER_S = 60.0


def backoff(
    attempt: int,
    error: ReconError | None = None,
    base_s: float = 0.2,
    cap_s: float = 5.0,
    rand: random.Random | None = None,
) -> float:
    """The wait before resending an idempotent call: the server's Retry-After when it gave
    one (capped), else exponential back-off with full jitter, so that many clients refused
    at once (an intake restarting under load) do not all come back in the same instant."""
    if error is not None and error.retry_after is not None:
        return min(MAX_RETRY_AFTER_S, error.retry_after)
    ceiling = min(cap_s, base_s * 2**attempt)
    return (rand or random).uniform(0, ceiling)
