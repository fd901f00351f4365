"""The one builder of an OperationObserved from what a provider answered (a `Seen`): the
dispatcher's answers and lookups, the pull reconciler's lookups and the simulator's all
go through it, so the answer's fields reach the decider the same way from every observer.

Pure: the message id and the clock reading arrive as arguments (each observer has its own
id rule: events.keys).
"""

from datetime import datetime

from events.inputs import OperationObserved, Source
from services.providers.classify import Seen


def observation(
    *,
    message_id: str,
    tenant: str,
    tx_id: str,
    action: str,
    op_key: str,
    attempt: int,
    source: Source,
    seen: Seen,
    observed_at: datetime,
    by_dispatcher: bool = False,
) -> OperationObserved:
    """What `seen` says of attempt `attempt` of the leg under `op_key`. `by_dispatcher`:
    the dispatcher that took the dispatch reports it (only its word ends the call)."""
    return OperationObserved(
        message_id=message_id,
        tenant=tenant,
        tx_id=tx_id,
        action=action,
        op_key=op_key,
        attempt=attempt,
        source=source,
        outcome=seen.outcome,
        status_code=seen.status_code,
        remote_id=seen.remote_id,
        body=seen.body,
        error=seen.error,
        observed_at=observed_at,
        by_dispatcher=by_dispatcher,
    )
