"""Preconditions re-checked before a new attempt reaches a provider (issue 12, item 3).

Pure: no I/O, no clock.

An attempt after the first (a review's `retry`, a re-send after a lookup proved the key
absent) happens later than the approval it was made under: the world may have moved. A
refund of a charge (`"charge"` in its payload) must still fit what the provider says is
left to refund, and the charge's authorization must not have been revoked; an operator may
have refunded from the provider's dashboard meanwhile. A precondition that no longer holds
stops the attempt: no call is made, and the dispatcher asks for a review
(`precondition_failed`) with the provider's balance as the evidence, never a second refund.
The operation stays open for a person: a review `retry` once the precondition holds again
(the attempt is checked again), or `not_applied` to fail it.
"""

from typing import Any

from events.inputs import Outcome
from events.observation import Seen

# The review reason of an attempt stopped by a precondition.
PRECONDITION_FAILED = "precondition_failed"

# What of the provider's balance answer becomes evidence: the numbers the judgement read,
# nothing else. The answer is stored where the agent can read it (the review, the
# operation's record), so whatever else the provider put there (or another resource's
# answer, reached through a crafted charge id) must not ride along.
BALANCE_FIELDS = {"charge": str, "amount": int, "refunded": int, "refundable": int, "revoked": bool}


def balance_evidence(body: Any) -> dict[str, Any]:
    """The allow-listed, typed fields of a balance answer (an allow-list, so a field the
    provider adds later stays out until someone decides otherwise)."""
    if not isinstance(body, dict):
        return {}
    return {
        name: body[name]
        for name, kind in BALANCE_FIELDS.items()
        if isinstance(body.get(name), kind) and (kind is bool or not isinstance(body[name], bool))
    }


def balance_needed(operation: str, payload: dict[str, Any]) -> str | None:
    """The charge whose balance this operation's precondition reads, if any."""
    charge = payload.get("charge")
    if operation == "payments.refund" and isinstance(charge, str):
        return charge
    return None


def judge_balance(payload: dict[str, Any], status: int, body: Any) -> Seen | None:
    """What the provider's balance answer means for the attempt: None to go on, or the
    observation that stops it. A charge the provider does not know (404) has no balance
    to hold the refund to (the provider judges it); an answer that is no balance cannot
    prove the precondition either way, so the attempt is `unknown` and tried again later."""
    if status == 404:
        return None
    if status != 200 or not isinstance(body, dict):
        return Seen(
            Outcome.UNKNOWN,
            status_code=status,
            body=balance_evidence(body),
            error="precondition_unverified: the refundable balance could not be read",
        )
    amount = payload.get("amount")
    refundable = body.get("refundable")
    if body.get("revoked"):
        reason = "the charge's authorization was revoked"
    elif not isinstance(amount, int) or not isinstance(refundable, int) or amount > refundable:
        reason = f"the refund of {amount!r} exceeds the refundable balance {refundable!r}"
    else:
        return None
    return Seen(
        Outcome.REJECTED,
        body={"precondition": "refundable_balance", "balance": balance_evidence(body)},
        error=f"precondition_failed: {reason}; no new attempt was sent",
    )
