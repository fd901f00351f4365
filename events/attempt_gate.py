"""Whether a new attempt of an accepted operation may be made now: the seam where an
approval stops being authority (issue 12, item 3).

Pure: no I/O, no clock.

A stored approval is evidence of what was approved, not permission to act again: before the
decider dispatches a new attempt that a person or a successor asked for (a review resolved
`retry`), each check here is asked, and any refusal it gives stops the attempt (the review
stays open and the refusal is recorded with its rule). The intake asks the decider's own
decide on the projected log first (services.intake.projected) and answers `409
attempt_refused`.
Checked here: a step that needed approval has a live one (its earlier dispatch spent the
one it ran on; an expiry ends it). Checked elsewhere, at the last moment before the call:
the grant still held and the kill switches (services.dispatcher.gatekeeper), and the
provider-side preconditions, which need the provider (services.providers.preconditions: a
refund still fits the refundable balance, its charge not revoked).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from events.approval_ledger import Approval
from events.definition import Leg, OperationSpec

# The reason a command that would start a refused attempt is refused with (CommandRefused).
ATTEMPT_REFUSED = "attempt_refused"


@dataclass(frozen=True)
class NewAttempt:
    tenant: str
    tx_id: str
    spec: OperationSpec
    leg: Leg
    attempt: int
    at: datetime
    cause: str  # "review_retry"
    approval: Approval | None  # the step's latest approval not yet spent


def approval_live(attempt: NewAttempt) -> list[str]:
    """A step that needed approval is attempted again only on a fresh one, unexpired."""
    if attempt.leg is not Leg.FORWARD or not attempt.spec.approval_required:
        return []
    if attempt.approval is None:
        return [
            f"approval_required: step {attempt.spec.action!r} needs a fresh approval for "
            f"attempt {attempt.attempt} (its earlier approval was spent on its dispatch)"
        ]
    if attempt.at > attempt.approval.expires_at:
        return [
            f"approval_expired: approval {attempt.approval.approval_id} lapsed at "
            f"{attempt.approval.expires_at.isoformat()}"
        ]
    return []


# Each returns the reasons it refuses the attempt (empty: allowed).
AttemptCheck = Callable[[NewAttempt], list[str]]
CHECKS: tuple[AttemptCheck, ...] = (approval_live,)


def attempt_refusals(attempt: NewAttempt, checks: Sequence[AttemptCheck] = CHECKS) -> list[str]:
    return [reason for check in checks for reason in check(attempt)]
