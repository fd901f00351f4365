"""The intake answers an approval the decider refuses with the API error of one table
(services.intake.approval_refusals), keeping docs/contract.md's codes and statuses."""

import pytest

from services.intake.approval_refusals import ANSWERS, refused
from transactions.approvals import ApprovalRefusal


def test_every_reason_the_decider_records_has_its_answer() -> None:
    assert set(ANSWERS) == set(ApprovalRefusal)


@pytest.mark.parametrize(
    ("reason", "status", "code"),
    [
        ("separation_of_duties", 403, "separation_of_duties"),
        ("approval_not_required", 409, "approval_not_required"),
        ("approval_used", 409, "approval_used"),
        ("step_already_run", 409, "approval_used"),
        ("digest_mismatch", 409, "digest_mismatch"),
        ("preview_not_shown", 409, "digest_mismatch"),
        ("step_not_shown", 409, "digest_mismatch"),
        ("approval_expired", 409, "approval_expired"),
        ("transaction_committed", 409, "not_awaiting_approval"),
        ("transaction_aborting", 409, "not_awaiting_approval"),
    ],
)
def test_the_public_code_of_each_reason(reason: str, status: int, code: str) -> None:
    error = refused(reason, "promote")
    assert (error.status, error.code) == (status, code)
    assert "'promote'" in error.message
