"""Whether a new attempt of an accepted operation may be made now: the seam where an
approval stops being authority (issue 12, item 3).

Pure: no I/O, no clock.

A stored approval is evidence of what was approved, not permission to act again: before the
decider dispatches a new attempt that a person or a successor asked for (a review resolved
`retry`), each check here is asked, and any refusal it gives stops the attempt (the review
stays open and the refusal is recorded with its rule). The governance work (approvals,
grants, kill switches) adds its checks to `CHECKS`: an approval unexpired and unrevoked, the
grant still held. The provider-side preconditions (is the refundable balance still there?)
need a lookup, so the dispatcher checks them before it applies (services.dispatcher.
preconditions).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from events.definition import Leg, OperationSpec
from services.decider.ownership import Owner


@dataclass(frozen=True)
class NewAttempt:
    tenant: str
    tx_id: str
    spec: OperationSpec
    leg: Leg
    attempt: int
    at: datetime
    cause: str  # "review_retry"
    owner: Owner | None


# Each returns the reasons it refuses the attempt (empty: allowed).
AttemptCheck = Callable[[NewAttempt], list[str]]
CHECKS: tuple[AttemptCheck, ...] = ()


def attempt_refusals(attempt: NewAttempt, checks: Sequence[AttemptCheck] = CHECKS) -> list[str]:
    return [reason for check in checks for reason in check(attempt)]
