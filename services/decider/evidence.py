"""Turning an observation into the evidence an event keeps."""

from events.inputs import OperationObserved
from events.transaction_events import Evidence


def evidence_of(obs: OperationObserved) -> Evidence:
    return Evidence(
        observation_id=obs.message_id,
        source=obs.source,
        outcome=obs.outcome,
        attempt=obs.attempt,
        status_code=obs.status_code,
        remote_id=obs.remote_id,
        body=obs.body,
        error=obs.error,
        observed_at=obs.observed_at.isoformat(),
    )
