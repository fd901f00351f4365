"""Turning an observation, or a person's resolution, into the evidence an event keeps."""

from events.definition import Resolution
from events.inputs import OperationObserved, Outcome, ResolveReview, Source
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


def evidence_of_review(cmd: ResolveReview, attempt: int) -> Evidence:
    """A resolution is evidence too: who decided what, when, and why."""
    outcome = Outcome.SUCCEEDED if cmd.resolution is Resolution.APPLIED else Outcome.REJECTED
    return Evidence(
        observation_id=cmd.message_id,
        source=Source.REVIEW,
        outcome=outcome,
        attempt=attempt,
        body={
            "resolution": cmd.resolution.value,
            "note": cmd.note,
            "actor": cmd.actor,
            "review_id": cmd.review_id,
        },
        observed_at=cmd.issued_at.isoformat(),
    )
