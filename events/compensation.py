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

from typing import Any


def compensation_payload(
    payload: dict[str, Any], op_key: str, remote_id: str | None
) -> dict[str, Any]:
    """What the compensation of the confirmed step (its approved `payload`, under `op_key`,
    confirmed as `remote_id`) sends: the step's own payload with a reference to what it
    reverses (our key and the provider's id from the evidence). The same for every
    operation today, and the shape every compensation recorded so far was sent with (a
    changed shape would resend a retried compensation under its key with another payload:
    a 409)."""
    return {**payload, "reverses": {"op_key": op_key, "remote_id": remote_id}}
