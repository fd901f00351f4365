"""given(events) / when(input) / then(events) for the transaction state machine."""

from support.txbuilders import abort, compensate, observed, plan, request_review, resolve, submit

from events.definition import Leg, OpStatus, Resolution, TxStatus
from events.inputs import DeciderInput, Outcome, Source
from events.transaction_events import (
    CommandIgnored,
    Event,
    OperationCompensated,
    OperationDispatched,
    TransactionFailed,
)
from transactions.state import TransactionState
from transactions.transaction import MAX_ATTEMPTS, decide, handle, initial_state, is_terminal


def given(*inputs: DeciderInput) -> TransactionState:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, _ = handle(state, message)
    return state


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def test_submission_accepts_and_dispatches_only_the_first_step() -> None:
    events = decide(given(), submit(["reserve", "charge"], ("receipt",)))
    assert types(events) == ["TransactionAccepted", "OperationDispatched"]
    assert events[1].action == "reserve" and events[1].attempt == 1  # type: ignore[union-attr]


def test_identical_resubmission_changes_nothing() -> None:
    state = given(submit(["reserve"]))
    assert decide(state, submit(["reserve"])) == []


def test_confirmation_dispatches_the_next_step() -> None:
    state = given(submit(["reserve", "charge"]))
    events = decide(state, observed("reserve", 1, Outcome.SUCCEEDED))
    assert types(events) == ["OperationConfirmed", "OperationDispatched"]
    assert events[1].action == "charge"  # type: ignore[union-attr]


def test_last_confirmation_commits_then_releases_notifications() -> None:
    state = given(submit(["reserve"], ("receipt",)))
    events = decide(state, observed("reserve", 1, Outcome.SUCCEEDED))
    assert types(events) == ["OperationConfirmed", "TransactionCommitted", "OperationDispatched"]
    assert events[2].action == "receipt"  # type: ignore[union-attr]


def test_unknown_blocks_the_next_step() -> None:
    state = given(submit(["reserve", "charge"]))
    events = decide(state, observed("reserve", 1, Outcome.UNKNOWN))
    assert types(events) == ["OperationUnknown"]


def test_lookup_that_finds_the_effect_confirms_an_unknown() -> None:
    state = given(submit(["reserve"]), observed("reserve", 1, Outcome.UNKNOWN))
    events = decide(state, observed("reserve", 1, Outcome.SUCCEEDED, 1, Source.LOOKUP))
    assert types(events) == ["OperationConfirmed", "TransactionCommitted"]


def test_unavailable_lookup_keeps_unknown_and_records_evidence() -> None:
    state = given(submit(["reserve"]), observed("reserve", 1, Outcome.UNKNOWN))
    after = given(
        submit(["reserve"]),
        observed("reserve", 1, Outcome.UNKNOWN),
        observed("reserve", 1, Outcome.UNAVAILABLE, 1, Source.LOOKUP),
    )
    assert types(decide(state, observed("reserve", 1, Outcome.UNAVAILABLE, 1, Source.LOOKUP))) == [
        "EvidenceRecorded"
    ]
    assert after.operation("reserve").status is OpStatus.UNKNOWN  # type: ignore[union-attr]


def test_absent_lookup_redispatches_under_the_same_key_with_a_new_attempt() -> None:
    state = given(submit(["reserve"]), observed("reserve", 1, Outcome.UNKNOWN))
    events = decide(state, observed("reserve", 1, Outcome.ABSENT, 1, Source.LOOKUP))
    assert types(events) == ["EvidenceRecorded", "OperationDispatched"]
    redispatch = events[1]
    assert redispatch.attempt == 2 and redispatch.lookup_first  # type: ignore[union-attr]
    assert redispatch.op_key == state.operation("reserve").spec.op_key  # type: ignore[union-attr]


def test_absent_lookup_before_the_dispatcher_answered_waits_for_the_dispatcher() -> None:
    # given a step dispatched that no dispatcher has answered yet (it may lag behind)
    state = given(submit(["reserve"]))
    # when the pull reconciler's lookup finds nothing under its key
    after, envelopes = handle(state, observed("reserve", 1, Outcome.ABSENT, 1, Source.LOOKUP))
    # then the sighting is evidence, and nothing is sent again: the first call may not
    # have been made yet, so spending an attempt would only race it into review
    assert [e.type for e in envelopes] == ["EvidenceRecorded"]
    reserve = after.operation("reserve")
    assert reserve is not None and reserve.status is OpStatus.DISPATCHED


def test_an_unavailable_lookup_before_the_dispatcher_answered_does_not_license_a_resend() -> None:
    # given a step dispatched that no dispatcher has answered yet (it lags, or its call is
    # still travelling), and a lookup by the pull reconciler that could not reach the provider
    state = given(
        submit(["reserve"]), observed("reserve", 1, Outcome.UNAVAILABLE, 1, Source.LOOKUP)
    )
    reserve = state.operation("reserve")
    assert reserve is not None and reserve.status is OpStatus.DISPATCHED
    # when its next lookup finds nothing under the key
    events = decide(state, observed("reserve", 1, Outcome.ABSENT, 2, Source.LOOKUP))
    # then nothing is sent again: a lookup that failed is not the dispatcher's answer, so the
    # absence proves no more than in test_absent_lookup_before_the_dispatcher_answered_...
    # (re-sending here spent an attempt per unavailable+absent pair, into review, with the
    # first call still to land: safe by key, but a review with an effect still to come)
    assert types(events) == ["EvidenceRecorded"]


def test_the_dispatchers_own_unavailable_lookup_is_its_answer() -> None:
    # given a re-delivered dispatch whose dispatcher looked up first and could not reach the
    # provider: it will not apply on its own, it resolves by lookups and reports
    by_dispatcher = observed("reserve", 1, Outcome.UNAVAILABLE, 1, Source.LOOKUP)
    by_dispatcher = by_dispatcher.model_copy(update={"by_dispatcher": True})
    state = given(submit(["reserve"]), by_dispatcher)
    reserve = state.operation("reserve")
    assert reserve is not None and reserve.status is OpStatus.UNKNOWN
    # when its last lookup finds nothing, then it is sent again (same key, lookup first)
    events = decide(state, observed("reserve", 1, Outcome.ABSENT, 2, Source.LOOKUP))
    assert types(events) == ["EvidenceRecorded", "OperationDispatched"]


def test_attempt_budget_ends_in_manual_review() -> None:
    inputs: list[DeciderInput] = [submit(["reserve"])]
    for attempt in range(1, MAX_ATTEMPTS):
        inputs += [
            observed("reserve", attempt, Outcome.UNKNOWN),
            observed("reserve", attempt, Outcome.ABSENT, 1, Source.LOOKUP),
        ]
    inputs.append(observed("reserve", MAX_ATTEMPTS, Outcome.UNKNOWN))
    state = given(*inputs)
    events = decide(state, observed("reserve", MAX_ATTEMPTS, Outcome.ABSENT, 1, Source.LOOKUP))
    assert types(events) == ["EvidenceRecorded", "OperationNeedsReview", "TransactionNeedsReview"]


def test_observation_of_an_older_attempt_is_recorded_and_ignored() -> None:
    state = given(
        submit(["reserve"]),
        observed("reserve", 1, Outcome.UNKNOWN),
        observed("reserve", 1, Outcome.ABSENT, 1, Source.LOOKUP),
    )
    events = decide(state, observed("reserve", 1, Outcome.REJECTED, 2))
    assert types(events) == ["ObservationIgnored"]
    assert events[0].reason == "stale_attempt"  # type: ignore[union-attr]


def test_rejected_step_fails_the_transaction_and_sends_no_notification() -> None:
    state = given(
        submit(["reserve", "charge"], ("receipt",)), observed("reserve", 1, Outcome.SUCCEEDED)
    )
    events = decide(state, observed("charge", 1, Outcome.REJECTED))
    assert types(events) == ["OperationFailed", "TransactionFailed"]
    assert events[1].compensable == ("reserve",)  # type: ignore[union-attr]
    after = given(
        submit(["reserve", "charge"], ("receipt",)),
        observed("reserve", 1, Outcome.SUCCEEDED),
        observed("charge", 1, Outcome.REJECTED),
    )
    assert after.status is TxStatus.COMPENSATING
    assert after.operation("receipt").status is OpStatus.PENDING  # type: ignore[union-attr]


def test_first_step_rejected_fails_with_nothing_to_compensate() -> None:
    state = given(submit(["reserve", "charge"]), observed("reserve", 1, Outcome.REJECTED))
    assert state.status is TxStatus.FAILED


def test_key_conflict_goes_to_manual_review() -> None:
    state = given(submit(["reserve"]))
    events = decide(state, observed("reserve", 1, Outcome.KEY_CONFLICT))
    assert types(events) == ["OperationNeedsReview", "TransactionNeedsReview"]


def test_duplicate_observation_is_a_no_op() -> None:
    state = given(submit(["reserve", "charge"]), observed("reserve", 1, Outcome.UNKNOWN))
    assert decide(state, observed("reserve", 1, Outcome.UNKNOWN)) == []


def test_late_answer_for_a_settled_operation_is_ignored() -> None:
    state = given(submit(["reserve", "charge"]), observed("reserve", 1, Outcome.SUCCEEDED))
    events = decide(state, observed("reserve", 1, Outcome.REJECTED, 5, Source.WEBHOOK))
    assert types(events) == ["ObservationIgnored"]


def test_state_round_trips_through_json() -> None:
    state = given(submit(["reserve"], ("receipt",)), observed("reserve", 1, Outcome.SUCCEEDED))
    assert TransactionState.model_validate_json(state.model_dump_json()) == state


# --- compensation -----------------------------------------------------------------


def compensating() -> TransactionState:
    """reserve and charge confirmed, then the third step declined."""
    return given(
        submit(["reserve", "charge", "ship"], ("receipt",), on_compensated=("sorry",)),
        observed("reserve", 1, Outcome.SUCCEEDED),
        observed("charge", 1, Outcome.SUCCEEDED),
        observed("ship", 1, Outcome.REJECTED),
    )


def test_failure_after_confirmed_steps_lists_them_for_compensation() -> None:
    state = compensating()
    assert state.status is TxStatus.COMPENSATING
    assert decide(state, plan("reserve", "charge")) == [
        CommandIgnored(command="PlanCompensation", reason="plan_does_not_match")
    ]
    assert types(decide(state, plan("charge", "reserve"))) == ["CompensationPlanned"]


def test_compensations_run_one_at_a_time_in_reverse_order() -> None:
    state = compensating()
    state, _ = handle(state, plan("charge", "reserve"))
    assert types(decide(state, compensate("reserve"))) == ["CommandIgnored"]
    events = decide(state, compensate("charge"))
    assert types(events) == ["OperationDispatched"]
    compensation = events[0]
    assert isinstance(compensation, OperationDispatched) and compensation.leg is Leg.COMPENSATION
    assert compensation.operation == "payments.refund"
    assert compensation.op_key == state.operation("charge").spec.compensation_key  # type: ignore[union-attr]
    assert compensation.payload["reverses"]["remote_id"] == "ch_charge"


def test_last_compensation_closes_the_transaction_and_releases_its_notifications() -> None:
    state = compensating()
    for message in (
        plan("charge", "reserve"),
        compensate("charge"),
        observed("charge", 1, Outcome.SUCCEEDED, 10, leg=Leg.COMPENSATION),
        compensate("reserve"),
    ):
        state, _ = handle(state, message)
    events = decide(state, observed("reserve", 1, Outcome.SUCCEEDED, 11, leg=Leg.COMPENSATION))
    assert types(events) == [
        "OperationCompensated",
        "TransactionCompensated",
        "OperationDispatched",
    ]
    assert events[2].action == "sorry"  # type: ignore[union-attr]


def test_compensated_event_names_what_remains() -> None:
    state = compensating()
    for message in (plan("charge", "reserve"), compensate("charge")):
        state, _ = handle(state, message)
    events = decide(state, observed("charge", 1, Outcome.SUCCEEDED, 10, leg=Leg.COMPENSATION))
    assert events[0] == OperationCompensated(
        action="charge",
        attempt=1,
        remote_id="ch_charge",
        evidence=events[0].evidence,  # type: ignore[union-attr]
        remaining=("reserve",),
    )


def test_rejected_compensation_goes_to_review_then_applied_resumes() -> None:
    state = compensating()
    for message in (plan("charge", "reserve"), compensate("charge")):
        state, _ = handle(state, message)
    state, envelopes = handle(
        state, observed("charge", 1, Outcome.REJECTED, 10, leg=Leg.COMPENSATION)
    )
    assert [e.type for e in envelopes] == ["OperationNeedsReview", "TransactionNeedsReview"]
    assert state.status is TxStatus.MANUAL_REVIEW
    events = decide(state, resolve("charge", 1, Resolution.APPLIED, Leg.COMPENSATION))
    assert types(events) == ["ReviewResolved", "OperationCompensated"]


# --- abort ------------------------------------------------------------------------


def test_abort_waits_for_the_in_flight_step_then_fails_for_compensation() -> None:
    state = given(submit(["reserve", "charge"]), abort())
    assert state.aborting and state.status is TxStatus.RUNNING
    events = decide(state, observed("reserve", 1, Outcome.SUCCEEDED))
    assert types(events) == ["OperationConfirmed", "TransactionFailed"]
    assert events[1] == TransactionFailed(action="", reason="aborted", compensable=("reserve",))


def test_abort_after_commit_or_during_compensation_changes_nothing() -> None:
    committed = given(submit(["reserve"]), observed("reserve", 1, Outcome.SUCCEEDED))
    assert types(decide(committed, abort())) == ["CommandIgnored"]
    assert types(decide(compensating(), abort())) == ["CommandIgnored"]


# --- reviews and webhooks -----------------------------------------------------------


def test_requested_review_then_retry_redispatches_under_the_same_key() -> None:
    state = given(
        submit(["reserve"]), observed("reserve", 1, Outcome.UNKNOWN), request_review("reserve", 1)
    )
    assert state.status is TxStatus.MANUAL_REVIEW
    events = decide(state, resolve("reserve", 1, Resolution.RETRY))
    assert types(events) == ["ReviewResolved", "OperationDispatched"]
    assert events[1].attempt == 2 and events[1].lookup_first  # type: ignore[union-attr]


def test_review_resolved_not_applied_fails_the_step_with_the_resolution_as_evidence() -> None:
    state = given(
        submit(["reserve", "charge"]),
        observed("reserve", 1, Outcome.SUCCEEDED),
        observed("charge", 1, Outcome.UNKNOWN),
        request_review("charge", 1),
    )
    events = decide(state, resolve("charge", 1, Resolution.NOT_APPLIED))
    assert types(events) == ["ReviewResolved", "OperationFailed", "TransactionFailed"]
    assert events[1].evidence.source is Source.REVIEW  # type: ignore[union-attr]


def test_a_review_resolved_twice_is_ignored_the_second_time() -> None:
    state = given(
        submit(["reserve"]),
        observed("reserve", 1, Outcome.UNKNOWN),
        request_review("reserve", 1),
        resolve("reserve", 1, Resolution.APPLIED),
    )
    events = decide(state, resolve("reserve", 1, Resolution.NOT_APPLIED, n=1))
    assert events == [CommandIgnored(command="ResolveReview", reason="review_not_open")]


def test_webhook_confirms_an_unknown_whatever_the_attempt() -> None:
    state = given(submit(["reserve"]), observed("reserve", 1, Outcome.UNKNOWN))
    events = decide(state, observed("reserve", 0, Outcome.SUCCEEDED, 3, Source.WEBHOOK))
    assert types(events) == ["OperationConfirmed", "TransactionCommitted"]


def test_webhook_cannot_prove_absence() -> None:
    state = given(submit(["reserve"]), observed("reserve", 1, Outcome.UNKNOWN))
    events = decide(state, observed("reserve", 0, Outcome.ABSENT, 3, Source.WEBHOOK))
    assert types(events) == ["EvidenceRecorded"]


def test_terminal_only_once_nothing_is_in_flight() -> None:
    committed = given(submit(["reserve"], ("receipt",)), observed("reserve", 1, Outcome.SUCCEEDED))
    assert committed.status is TxStatus.COMMITTED
    assert not is_terminal(committed)  # the receipt is still being sent
    done, _ = handle(committed, observed("receipt", 1, Outcome.SUCCEEDED, 1))
    assert is_terminal(done)
    assert not is_terminal(given(submit(["reserve"])))


def test_a_webhook_saying_absent_never_resends_whatever_attempt_it_carries() -> None:
    # given a step in flight at attempt 1
    state = given(submit(["reserve"]))
    # when a webhook that happens to carry attempt 1 says the effect is absent
    events = decide(state, observed("reserve", 1, Outcome.ABSENT, 3, Source.WEBHOOK))
    # then it is kept as evidence only: a webhook's silence proves nothing, so no re-send
    assert types(events) == ["EvidenceRecorded"]


def test_a_webhook_confirms_even_when_it_carries_an_old_attempt() -> None:
    # given a step re-sent (attempt 2) after a lookup proved attempt 1 absent
    state = given(
        submit(["reserve"]),
        observed("reserve", 1, Outcome.UNKNOWN),
        observed("reserve", 1, Outcome.ABSENT, 1, Source.LOOKUP),
    )
    # when a webhook carrying attempt 1 reports the effect under the (same) key
    events = decide(state, observed("reserve", 1, Outcome.SUCCEEDED, 2, Source.WEBHOOK))
    # then it proves the effect exists: the key is the same for every attempt
    assert types(events) == ["OperationConfirmed", "TransactionCommitted"]


def test_an_answer_carrying_attempt_0_is_not_taken_for_a_webhook() -> None:
    # given a step in flight at attempt 1
    state = given(submit(["reserve"]))
    # when a lookup answer arrives with attempt 0 (tied to no dispatch we made)
    events = decide(state, observed("reserve", 0, Outcome.SUCCEEDED, 3, Source.LOOKUP))
    # then the fencing token does not match: recorded and ignored
    assert types(events) == ["ObservationIgnored"]
    assert events[0].reason == "stale_attempt"  # type: ignore[union-attr]


def test_a_step_without_undo_is_left_out_of_what_a_failure_compensates() -> None:
    # given two confirmed steps, the first of which has no undo, and a third in flight
    state = given(
        submit(["notify", "reserve", "charge"], uncompensated=("notify",)),
        observed("notify", 1, Outcome.SUCCEEDED, 0),
        observed("reserve", 1, Outcome.SUCCEEDED, 1),
    )
    # when the third is refused
    events = decide(state, observed("charge", 1, Outcome.REJECTED, 2))
    # then only the step that can be undone is offered for compensation
    assert types(events) == ["OperationFailed", "TransactionFailed"]
    assert events[1] == TransactionFailed(
        action="charge", reason="step_rejected", compensable=("reserve",)
    )
