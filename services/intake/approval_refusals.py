"""The decider's refusal of an approval (transactions.approvals.ApprovalRefusal), as the
API answers it (docs/contract.md, "Errors"): the one table from the reason the log would
record to the public code, so the route answers what the decider will decide.

Several reasons share a public code: the contract's `digest_mismatch` covers every way an
approval is not bound to this proposal's latest preview as shown; `approval_used` a step
that ran already. A transaction that takes no approval any more (`transaction_<status>`)
is `not_awaiting_approval`.
"""

from typing import Final

from services.intake.errors import ApiError
from transactions.approvals import ApprovalRefusal

PREVIEW_AGAIN = "preview the transaction and approve that digest"

ANSWERS: Final[dict[ApprovalRefusal, tuple[int, str, str]]] = {
    ApprovalRefusal.SEPARATION_OF_DUTIES: (
        403,
        "separation_of_duties",
        "you requested this transaction and may not approve it; ask another operator",
    ),
    ApprovalRefusal.NOT_REQUIRED: (
        409,
        "approval_not_required",
        "this is not a step that waits for approval; nothing to approve",
    ),
    ApprovalRefusal.USED: (409, "approval_used", "the step already ran on an approval"),
    ApprovalRefusal.STEP_ALREADY_RUN: (409, "approval_used", "the step already ran"),
    ApprovalRefusal.DIGEST_MISMATCH: (
        409,
        "digest_mismatch",
        "the digest is not the latest preview of this transaction's proposal: the proposal "
        f"changed, or it was previewed again; {PREVIEW_AGAIN}",
    ),
    ApprovalRefusal.PREVIEW_NOT_SHOWN: (
        409,
        "digest_mismatch",
        f"the approval carries no preview to bind it to; {PREVIEW_AGAIN}",
    ),
    ApprovalRefusal.STEP_NOT_SHOWN: (
        409,
        "digest_mismatch",
        f"the preview does not show this step waiting for approval; {PREVIEW_AGAIN}",
    ),
    ApprovalRefusal.PREVIEW_TOO_LARGE: (
        409,
        "preview_too_large",
        "the preview is too large to be recorded with an approval; split the transaction",
    ),
    ApprovalRefusal.EXPIRED: (
        409,
        "approval_expired",
        "an approval that expires when it is given has already lapsed; give expires_in_s of "
        "at least 1",
    ),
}


def refused(reason: str, action: str) -> ApiError:
    """The API error for the decider's refusal `reason` of an approval of `action`."""
    try:
        status, code, message = ANSWERS[ApprovalRefusal(reason)]
    except ValueError:
        pass  # transaction_<status>: committed, failed, aborting, ...
    else:
        return ApiError(status, code, f"step {action!r}: {message}")
    status_word = reason.removeprefix("transaction_")
    return ApiError(
        409,
        "not_awaiting_approval",
        f"step {action!r}: the transaction is {status_word} and takes no approval",
    )
