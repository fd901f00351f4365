"""What a provider's answer means, before anyone decides what to do about it.

The rule that matters: only a definitive refusal is `rejected`. A timeout, a reset, a
5xx, a 408/429 or a 202 says nothing about whether the effect exists: `unknown`.
"""

from dataclasses import dataclass
from typing import Any

from events.inputs import Outcome

# 4xx answers that are about the request's timing, not its content: no proof of absence.
NOT_DEFINITIVE_4XX = {408, 425, 429}


@dataclass(frozen=True)
class Seen:
    outcome: Outcome
    status_code: int | None = None
    remote_id: str | None = None
    body: Any = None
    error: str | None = None


def classify_response(status: int, body: Any) -> Seen:
    remote_id = body.get("id") if isinstance(body, dict) else None
    if 200 <= status < 300:
        succeeded = status != 202 and isinstance(body, dict) and body.get("status") == "succeeded"
        outcome = Outcome.SUCCEEDED if succeeded else Outcome.UNKNOWN
        return Seen(outcome, status, remote_id, body)
    if status == 409 and isinstance(body, dict) and body.get("error") == "idempotency_key_reused":
        return Seen(Outcome.KEY_CONFLICT, status, None, body)
    if 400 <= status < 500 and status not in NOT_DEFINITIVE_4XX:
        return Seen(Outcome.REJECTED, status, None, body)
    return Seen(Outcome.UNKNOWN, status, None, body)


def classify_lookup(status: int, body: Any) -> Seen:
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("effects"), list):
        return Seen(Outcome.UNAVAILABLE, status, None, body)
    effects = [e for e in body["effects"] if isinstance(e, dict)]
    done = [e for e in effects if e.get("status", "succeeded") == "succeeded"]
    if done:
        return Seen(Outcome.SUCCEEDED, status, str(done[0].get("id")), body)
    if effects:
        return Seen(Outcome.UNKNOWN, status, None, body)  # known to the provider, not done
    return Seen(Outcome.ABSENT, status, None, body)


def unreachable(error: BaseException) -> Seen:
    return Seen(Outcome.UNKNOWN, None, None, None, f"{type(error).__name__}: {error}")
