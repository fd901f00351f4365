"""What an observer saw of an effect (a `Seen`), and the one builder of an OperationObserved
from it: the dispatcher's answers and lookups, the pull reconciler's lookups, a provider's
webhook (reconcilers.webhook_intake), the simulator's and the synthetic benchmark log's all
go through it, so the sighting's fields reach the decider the same way from every observer.

Here in the vocabulary, not with the provider adapters, so that the webhook ingestion
(reconcilers/, which imports no process) builds its observations with it too. What a
provider's answer means is services.providers.classify's.

Pure: the message id and the clock reading arrive as arguments (each observer has its own
id rule: events.keys).
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events.inputs import OperationObserved, Outcome, SignedDelivery, Source


@dataclass(frozen=True)
class Seen:
    outcome: Outcome
    status_code: int | None = None
    remote_id: str | None = None
    body: Any = None
    error: str | None = None
    # Why a person must look (our credentials, route or configuration are wrong): the
    # runtime logs it at ERROR. None for an answer that is the provider's business.
    alarm: str | None = None


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
    delivery: SignedDelivery | None = None,
) -> OperationObserved:
    """What `seen` says of attempt `attempt` of the leg under `op_key`. `by_dispatcher`:
    the dispatcher that took the dispatch reports it (only its word ends the call).
    `delivery`: a webhook's, as received (evidence for an auditor)."""
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
        delivery=delivery,
    )
