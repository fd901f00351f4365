"""What Stripe's answers mean (https://docs.stripe.com/error-handling, /api/errors,
/api/idempotent_requests), the Stripe adapter's one judge.

Pure: no I/O.

- 2xx: the object's status says whether the operation took effect (operations.py); a 2xx
  that is not the object asked for (a proxy's page, a truncated body) says nothing.
- 400 `idempotency_error`: the key was used before with other parameters; the first
  request's effect is not this one's (`key_conflict`, never the first one's answer).
- 402 (`card_error`: the decline) and 400 `invalid_request_error`: Stripe refused this
  payload; nothing was made. Whitelisted by Stripe's error shape: a 400/402 whose body is
  not Stripe's error object did not come from Stripe's judgement.
- 409: a request under the same key is still being processed (or an object lock): the
  first request's outcome is not known yet. Unknown, and no alarm: a lookup settles it.
- 408/425/429 (rate limit): timing; 5xx: Stripe's trouble, the request may have run.
- Any other 4xx (401 key, 403 permission, 404 route or object): our configuration.
"""

from typing import Any

from events.inputs import Outcome
from events.observation import Seen
from services.providers.classify import TIMING_4XX, misdirected
from services.providers.stripe.operations import OPERATIONS, StripeOperation

IDEMPOTENCY_ERROR = "idempotency_error"
REFUSAL_TYPES = frozenset({"card_error", "invalid_request_error"})


def classify(operation: str, status: int, body: Any) -> Seen:
    op = OPERATIONS.get(operation)
    if op is None:
        return misdirected(status, body, f"no Stripe operation {operation!r}")
    if 200 <= status < 300:
        return judge_object(op, status, body)
    error = _error(body)
    kind = error.get("type") if error is not None else None
    if status == 400 and kind == IDEMPOTENCY_ERROR:
        return Seen(Outcome.KEY_CONFLICT, status, None, body)
    if status == 402 and error is not None:
        return Seen(Outcome.REJECTED, status, None, body)
    if status == 400 and kind in REFUSAL_TYPES:
        return Seen(Outcome.REJECTED, status, None, body)
    if status == 409 or status in TIMING_4XX or status >= 500:
        return Seen(Outcome.UNKNOWN, status, None, body)
    if 400 <= status < 500:
        code = error.get("code") or kind if error is not None else None
        return misdirected(status, body, str(code or "no Stripe error"))
    return Seen(Outcome.UNKNOWN, status, None, body)


def judge_object(op: StripeOperation, status: int, body: Any) -> Seen:
    """What one Stripe object (an answer's, or one a lookup found) says of `op`."""
    if not isinstance(body, dict) or body.get("object") != op.kind:
        return Seen(Outcome.UNKNOWN, status, None, body, error=f"not a Stripe {op.kind}")
    raw_id = body.get("id")
    if not isinstance(raw_id, str):
        return Seen(Outcome.UNKNOWN, status, None, body, error=f"a {op.kind} without an id")
    state = body.get("status")
    if op.done is None or state in op.done:
        return Seen(Outcome.SUCCEEDED, status, raw_id, body)
    if state in op.refused:
        return Seen(Outcome.REJECTED, status, raw_id, body)
    return Seen(Outcome.UNKNOWN, status, raw_id, body)


def _error(body: Any) -> dict[str, Any] | None:
    """Stripe's error object (`{"error": {"type": ..., "code": ..., "message": ...}}`)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("type"), str):
        return error
    return None
