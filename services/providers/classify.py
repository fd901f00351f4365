"""What a provider's answer means, before anyone decides what to do about it.

The rule that matters: only a definitive refusal is `rejected`. A timeout, a reset, a
5xx, a 408/429 or a 202 says nothing about whether the effect exists: `unknown`.

A 4xx is a rejection only when it is the provider refusing *this payload* (the decline, the
out-of-stock, the invalid request). A 401/403 is about our credentials, a 404/405 about our
route, a 409 other than a reused key a concurrent request under the same key: none of them
says the effect cannot exist or will not follow, so they are `unknown` (a lookup settles
them) and carry an `alarm` an operator must see, never a silent `failed`.
"""

from typing import Any

from events.definition import STALE_REVISION
from events.inputs import Outcome
from events.observation import Seen

# The provider's definitive refusals of a payload (the sandbox's decline is 402, its
# out-of-stock 422; Stripe's card errors are 402, its invalid requests 400). Whitelisted:
# a 4xx nobody listed here is not evidence of absence.
DEFINITIVE_4XX = frozenset({400, 402, 422})
# 4xx answers about the request's timing, not its content: a retry may well succeed.
TIMING_4XX = frozenset({408, 425, 429})


def classify_response(status: int, body: Any) -> Seen:
    # The provider's id as text whatever its JSON type: a numeric id is evidence too, and
    # must not fail the observation's validation.
    raw_id = body.get("id") if isinstance(body, dict) else None
    remote_id = None if raw_id is None else str(raw_id)
    if 200 <= status < 300:
        succeeded = status != 202 and isinstance(body, dict) and body.get("status") == "succeeded"
        outcome = Outcome.SUCCEEDED if succeeded else Outcome.UNKNOWN
        return Seen(outcome, status, remote_id, body)
    if status == 409 and isinstance(body, dict) and body.get("error") == "idempotency_key_reused":
        return Seen(Outcome.KEY_CONFLICT, status, None, body)
    if status == 409 and isinstance(body, dict) and body.get("error") == STALE_REVISION:
        # The provider refused for good: the resource moved on since the plan. Never
        # re-sent with the new revision on the agent's behalf; the agent re-plans.
        return Seen(Outcome.REJECTED, status, None, body)
    if status in DEFINITIVE_4XX:
        return Seen(Outcome.REJECTED, status, None, body)
    if 400 <= status < 500 and status not in TIMING_4XX:
        return misdirected(status, body, _error_code(body))
    return Seen(Outcome.UNKNOWN, status, None, body)


def misdirected(status: int, body: Any, code: str) -> Seen:
    """A 4xx about our side of the call (credentials, route, configuration), not about the
    payload: `unknown`, with the alarm a person must see. Every adapter's rule ends here
    for the 4xx it does not list as a refusal."""
    alarm = (
        f"provider answered {status} ({code}), not a refusal of the payload; "
        "check the provider's credentials, URL and configuration"
    )
    # The alarm is also the observation's error: the evidence trail says why.
    return Seen(Outcome.UNKNOWN, status, None, body, error=alarm, alarm=alarm)


def _error_code(body: Any) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])[:200]
    return "no error code"


def classify_lookup(status: int, body: Any) -> Seen:
    if 400 <= status < 500 and status not in TIMING_4XX:
        return lookup_misdirected(status, body, _error_code(body))
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("effects"), list):
        return Seen(Outcome.UNAVAILABLE, status, None, body)
    effects = [e for e in body["effects"] if isinstance(e, dict)]
    done = [e for e in effects if e.get("status", "succeeded") == "succeeded"]
    if done:
        return Seen(Outcome.SUCCEEDED, status, str(done[0].get("id")), body)
    if effects:
        return Seen(Outcome.UNKNOWN, status, None, body)  # known to the provider, not done
    return Seen(Outcome.ABSENT, status, None, body)


def lookup_misdirected(status: int, body: Any, code: str) -> Seen:
    """A lookup refused for our credentials, route or configuration: nothing was learnt
    (`unavailable`), and a person must see why."""
    alarm = (
        f"lookup answered {status} ({code}); "
        "check the provider's credentials, URL and configuration"
    )
    return Seen(Outcome.UNAVAILABLE, status, None, body, error=alarm, alarm=alarm)


def unreachable(error: BaseException) -> Seen:
    return Seen(Outcome.UNKNOWN, None, None, None, f"{type(error).__name__}: {error}")
