"""What an answer to an apply means, by the provider file's rules: the operation's own
first, then the provider's; the first whose status and body values match says
confirmed, refused (definitive), key_conflict or unknown. Nothing matched falls to recon's
one rule for the rest (services.providers.classify): a 4xx about our side is unknown with
an alarm, timing and 5xx unknown. A `202` is final only where the operation says so. Pure: no I/O.
"""

from typing import Any

from events.inputs import Outcome
from events.observation import Seen
from services.providers.classify import TIMING_4XX, misdirected
from services.providers.declared import fields
from services.providers.declared.model import Operation, ProviderFile, Rule

MEANS = {
    "confirmed": Outcome.SUCCEEDED,
    "refused": Outcome.REJECTED,
    "key_conflict": Outcome.KEY_CONFLICT,
    "unknown": Outcome.UNKNOWN,
}


def status_matches(declared: list[int | str], status: int) -> bool:
    return any(s == status or (isinstance(s, str) and s[0] == str(status)[0]) for s in declared)


def matches(rule: Rule, status: int, body: Any) -> bool:
    if not status_matches(rule.status, status):
        return False
    for pointer, accepted in rule.when.items():
        value = fields.get(body, pointer)
        if value is fields.MISSING or value not in (
            accepted if isinstance(accepted, list) else [accepted]
        ):
            return False
    return True


# Rate limited: about timing, whatever a rule says (a `4xx` rule must not turn it into
# a refusal); the adapter waits it out first (declared.adapter).
RATE_LIMITED = 429


def classify(declared: ProviderFile, op: Operation, status: int, body: Any) -> Seen:
    if status == RATE_LIMITED:
        return Seen(Outcome.UNKNOWN, status, None, body, error="rate_limited")
    for rule in (*op.answers, *declared.answers):
        if matches(rule, status, body):
            return _seen(rule, status, body)
    if status == 202 and op.accepted_is_final:
        # Fire and forget, declared so: nothing more will ever be told.
        return Seen(Outcome.SUCCEEDED, status, None, body)
    if 400 <= status < 500 and status not in TIMING_4XX:
        return misdirected(status, body, "no rule of the provider file matched")
    return Seen(Outcome.UNKNOWN, status, None, body)


def _seen(rule: Rule, status: int, body: Any) -> Seen:
    outcome = MEANS[rule.means]
    if outcome is Outcome.SUCCEEDED:
        assert rule.id is not None  # the model requires it
        raw = fields.get(body, rule.id)
        if raw is fields.MISSING or raw is None or isinstance(raw, dict | list):
            # A confirmation that names nothing is not evidence of an effect.
            return Seen(Outcome.UNKNOWN, status, None, body, error=f"no id at {rule.id}")
        return Seen(outcome, status, str(raw), body)
    return Seen(outcome, status, None, body)
