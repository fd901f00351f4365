"""given(events) / when(input) / then(events) for the transaction state machine."""

from txbuilders import observed, submit

from events.definition import OpStatus, TxStatus
from events.inputs import DeciderInput, Outcome, Source
from events.transaction_events import Event
from services.decider.transaction import (
    MAX_ATTEMPTS,
    TransactionState,
    decide,
    handle,
    initial_state,
)


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
    after = given(
        submit(["reserve", "charge"], ("receipt",)),
        observed("reserve", 1, Outcome.SUCCEEDED),
        observed("charge", 1, Outcome.REJECTED),
    )
    assert after.status is TxStatus.FAILED
    assert after.operation("receipt").status is OpStatus.PENDING  # type: ignore[union-attr]


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
