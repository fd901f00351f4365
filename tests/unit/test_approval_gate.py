"""The approval gate in the pure decider (transactions.approvals): a gated step waits
in awaiting_approval; only an approval bound to this proposal, from someone other than the
agent, unexpired when the step is reached and unused, lets it be dispatched; a rejection
fails the transaction and compensates what ran."""

from datetime import timedelta

from support.approval_builders import AGENT, approve, gated_submit, reject
from support.txbuilders import T0, observed, request_review, resolve

from events.definition import OpStatus, Resolution, TxStatus
from events.inputs import DeciderInput, Outcome
from events.keys import stale_rejection_id
from events.transaction_events import Event
from transactions.state import TransactionState
from transactions.transaction import decide, handle, initial_state


def given(*inputs: DeciderInput) -> TransactionState:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, _ = handle(state, message)
    return state


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def waiting() -> TransactionState:
    return given(gated_submit(), observed("reserve", 1, Outcome.SUCCEEDED))


def test_a_gated_step_waits_for_approval_after_the_steps_before_it() -> None:
    events = decide(given(gated_submit()), observed("reserve", 1, Outcome.SUCCEEDED))
    assert types(events) == ["OperationConfirmed", "OperationAwaitingApproval"]
    state = waiting()
    assert state.status is TxStatus.AWAITING_APPROVAL
    assert state.operation("promote").status is OpStatus.AWAITING_APPROVAL  # type: ignore[union-attr]


def test_a_bound_approval_from_another_person_dispatches_it_once() -> None:
    events = decide(waiting(), approve(5))
    assert types(events) == ["OperationApproved", "OperationDispatched"]
    state = given(gated_submit(), observed("reserve", 1, Outcome.SUCCEEDED), approve(5))
    assert state.status is TxStatus.RUNNING
    # Single use: the same approval again is refused, and nothing more is dispatched.
    again = decide(state, approve(6))
    assert types(again) == ["ApprovalRefused"]
    assert again[0].reason == "approval_used"  # type: ignore[union-attr]


def test_approvals_that_do_not_hold_are_refused_on_the_chain_and_nothing_runs() -> None:
    state = waiting()
    for bad, reason in (
        (approve(5, approval_id="a", digest="0" * 64), "digest_mismatch"),
        (approve(5, approval_id="b", approver=AGENT), "separation_of_duties"),
        (approve(5, approval_id="c", valid_s=0), "approval_expired"),
        (approve(5, approval_id="d", action="reserve"), "approval_not_required"),
    ):
        events = decide(state, bad)
        assert types(events) == ["ApprovalRefused"], reason
        assert events[0].reason == reason  # type: ignore[union-attr]


def test_an_approval_that_expires_before_its_step_is_reached_is_void() -> None:
    # Approved ahead, while the reserve is still in flight; valid for 5 s.
    state = given(gated_submit(), approve(1, valid_s=5))
    assert state.status is TxStatus.RUNNING  # the reserve runs; nothing waited
    late = observed("reserve", 1, Outcome.SUCCEEDED).model_copy(
        update={"observed_at": T0 + timedelta(seconds=60)}
    )
    assert types(decide(state, late)) == [
        "OperationConfirmed",
        "ApprovalExpired",
        "OperationAwaitingApproval",
    ]
    # In time, the same approval lets the step run as soon as it is reached.
    early = observed("reserve", 1, Outcome.SUCCEEDED)
    assert types(decide(state, early)) == ["OperationConfirmed", "OperationDispatched"]


def test_a_rejection_fails_the_transaction_and_compensates_what_ran() -> None:
    events = decide(waiting(), reject(5))
    assert types(events) == ["OperationRejected", "TransactionFailed"]
    assert events[1].reason == "rejected"  # type: ignore[union-attr]
    assert events[1].compensable == ("reserve",)  # type: ignore[union-attr]
    # Before the step waits there is nothing to reject.
    assert types(decide(given(gated_submit()), reject(1))) == ["CommandIgnored"]


def test_a_stale_revision_at_apply_fails_the_step_for_good() -> None:
    state = given(gated_submit(), observed("reserve", 1, Outcome.SUCCEEDED), approve(5))
    stale = observed("promote", 1, Outcome.REJECTED).model_copy(
        update={"status_code": 409, "body": {"error": "stale_revision"}}
    )
    events = decide(state, stale)
    assert types(events) == ["OperationFailed", "TransactionFailed"]
    assert events[1].reason == "stale_revision"  # type: ignore[union-attr]


def in_review() -> TransactionState:
    """The promote ran on its approval, its answer was lost, and a person was asked."""
    return given(*_in_review_inputs())


def test_a_review_retry_of_a_gated_step_needs_a_fresh_approval_not_the_spent_one() -> None:
    state = in_review()
    assert state.status is TxStatus.MANUAL_REVIEW
    # The approval the first attempt ran on is spent: a retry on it alone is refused, on
    # the chain, with the rule; the review stays open and nothing is dispatched.
    refused = decide(state, resolve("promote", 1, Resolution.RETRY, n=10))
    assert types(refused) == ["CommandRefused"]
    assert refused[0].reason == "attempt_refused"  # type: ignore[union-attr]
    assert "approval_required" in refused[0].rule  # type: ignore[union-attr]
    # A person approves again (the step is in review, not run); the retry then dispatches
    # attempt 2, which spends the new approval in turn.
    again = decide(state, approve(20, approval_id="ap-2"))
    assert types(again) == ["OperationApproved"]
    approved = given(*_in_review_inputs(), approve(20, approval_id="ap-2"))
    retried = decide(approved, resolve("promote", 1, Resolution.RETRY, n=30))
    assert types(retried) == ["ReviewResolved", "OperationDispatched"]
    assert retried[1].attempt == 2  # type: ignore[union-attr]


def test_a_review_retry_after_the_fresh_approval_lapsed_is_refused() -> None:
    approved = given(*_in_review_inputs(), approve(20, approval_id="ap-2", valid_s=5))
    late = decide(approved, resolve("promote", 1, Resolution.RETRY, n=60))
    assert types(late) == ["CommandRefused"]
    assert "approval_expired" in late[0].rule  # type: ignore[union-attr]


def _in_review_inputs() -> list[DeciderInput]:
    return [
        gated_submit(),
        observed("reserve", 1, Outcome.SUCCEEDED),
        approve(5),
        observed("promote", 1, Outcome.UNKNOWN),
        request_review("promote", 1),
    ]


def test_refusing_a_step_approved_ahead_revokes_its_unspent_approval() -> None:
    # Approved while the reserve is still in flight: the promote is pending, its approval
    # live. Refusing it now fails the transaction: the approval is never dispatched on.
    events = decide(given(gated_submit(), approve(1)), reject(2))
    assert types(events) == ["OperationRejected", "TransactionFailed"]
    revoked = given(gated_submit(), approve(1), reject(2))
    assert revoked.operation("promote").status is OpStatus.FAILED  # type: ignore[union-attr]
    after = decide(revoked, observed("reserve", 1, Outcome.SUCCEEDED))
    assert [e.action for e in after if e.type == "OperationDispatched"] != ["promote"]


def test_a_second_stale_revision_refusal_is_a_new_command_not_a_duplicate() -> None:
    # The first came while the step was still pending (ignored); the second, once it waits,
    # must reach the decider: the dedupe by message_id would drop a repeated id.
    first = stale_rejection_id("demo", "tx-1", "promote", "ops", T0.isoformat())
    later = (T0 + timedelta(seconds=1)).isoformat()
    second = stale_rejection_id("demo", "tx-1", "promote", "ops", later)
    assert first != second
    state = given(gated_submit())
    ignored = reject(1, reason="stale_revision").model_copy(update={"message_id": first})
    assert types(decide(state, ignored)) == ["CommandIgnored"]
    state = waiting()
    ends = reject(2, reason="stale_revision").model_copy(update={"message_id": second})
    assert types(decide(state, ends))[0] == "OperationRejected"


def test_the_operator_whose_key_submitted_may_not_approve_it_as_another_agent() -> None:
    # Separation of duties on principals, judged by the decider on its own log too: the
    # transaction names agent-1, but operator "alice" submitted it with her key.
    submitted = gated_submit().model_copy(update={"submitted_by": "operator:alice"})
    state = given(submitted, observed("reserve", 1, Outcome.SUCCEEDED))
    assert state.submitted_by == "operator:alice"

    refused = decide(state, approve(5, approver="alice"))
    allowed = decide(state, approve(5, approver="bob"))

    assert types(refused) == ["ApprovalRefused"]
    assert refused[0].reason == "separation_of_duties"  # type: ignore[union-attr]
    assert types(allowed) == ["OperationApproved", "OperationDispatched"]
