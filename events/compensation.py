"""Pure: what a compensation sends.

A compensation (the undo of a confirmed step; "compensation" is the one name the API, the
events and the code give it) runs under its step's grant and without a person (the saga
sends it on its own), so the agent must not be able to choose it: the provider declares the
one compensation of each operation (events.catalog, `OperationInfo.compensation`; the intake
refuses any other) and its payload is derived here from the step's approved payload and the
evidence of its confirmation, never taken from the agent. A refund therefore names the
charge that was confirmed (the provider's id from the evidence) and the charged amount, not
a charge or an amount the agent picked (`reverses.remote_id`).
"""

from collections.abc import Mapping
from typing import Any


def compensation_payload(
    payload: dict[str, Any],
    op_key: str,
    remote_id: str | None,
    template: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What the compensation of the confirmed step (its approved `payload`, under `op_key`,
    confirmed as `remote_id`) sends: the step's own payload with a reference to what it
    reverses (our key and the provider's id from the evidence). The same for every
    operation today, and the shape every compensation recorded so far was sent with (a
    changed shape would resend a retried compensation under its key with another payload:
    a 409)."""
    if template is not None:
        return templated(template, payload, op_key, remote_id)
    return {**payload, "reverses": {"op_key": op_key, "remote_id": remote_id}}


# The sources an undo field may be built from, besides a JSON pointer into the payload.
SOURCES = ("$remote_id", "$op_key")


def source_problem(source: str) -> str | None:
    """None when `source` is one `templated` can read, else why not (checked when an
    adapter's declaration is loaded, so a typo stops start-up)."""
    if source in SOURCES or source.startswith("/"):
        return None
    return f"{source!r} is neither {' nor '.join(SOURCES)} nor a JSON pointer (/field)"


def templated(
    template: Mapping[str, str], payload: dict[str, Any], op_key: str, remote_id: str | None
) -> dict[str, Any]:
    """The undo's payload as its provider declared it (OperationInfo.undo_payload): a
    Stripe payment intent is cancelled by its id (`{"payment_intent": "$remote_id"}`), not
    by the create's amount and currency. A source with no value (no id in the evidence, a
    field the step did not carry) is left out, and the provider refuses what it lacks."""
    values: dict[str, Any] = {}
    for field, source in template.items():
        if source == "$remote_id":
            value: Any = remote_id
        elif source == "$op_key":
            value = op_key
        else:
            value = _pointed(payload, source)
        if value is not None:
            values[field] = value
    return values


def _pointed(payload: Any, pointer: str) -> Any:
    for part in pointer.lstrip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(payload, dict) or part not in payload:
            return None
        payload = payload[part]
    return payload
