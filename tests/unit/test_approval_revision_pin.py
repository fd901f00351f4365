"""An approval holds for the provider state it was shown (transactions.revisions): the
call of a gated step that names no expected_revision carries the revision its approval was
given at; a step that names one keeps the agent's; every attempt under the key carries the
first attempt's payload; and the intent (its fingerprint, its spec) is never rewritten."""

from support.approval_builders import approve, gated_submit
from support.txbuilders import observed, request_review, resolve

from events.approval_events import OperationApproved
from events.definition import Resolution
from events.inputs import DeciderInput, Outcome
from events.transaction_events import Event, OperationDispatched
from transactions.state import TransactionState
from transactions.transaction import decide, handle, initial_state


def given(*inputs: DeciderInput) -> TransactionState:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, _ = handle(state, message)
    return state


def dispatched(events: list[Event]) -> OperationDispatched:
    [dispatch] = [e for e in events if isinstance(e, OperationDispatched)]
    return dispatch


def unplanned_waiting() -> TransactionState:
    """The promote names no expected_revision and waits for approval."""
    return given(gated_submit(planned=False), observed("reserve", 1, Outcome.SUCCEEDED))


def test_the_call_of_an_unpinned_step_carries_the_revision_it_was_approved_at() -> None:
    state = unplanned_waiting()
    events = decide(state, approve(5, revision=7))
    approved = events[0]
    assert isinstance(approved, OperationApproved)
    assert approved.revision == 7
    dispatch = dispatched(events)
    assert dispatch.payload == {"resource": "class-1", "user": "u6", "expected_revision": 7}
    assert dispatch.pinned_revision == 7
    # The intent is what the agent sent: the pin lives on the call, not on the spec.
    after = given(gated_submit(planned=False), observed("reserve", 1, Outcome.SUCCEEDED))
    after, _ = handle(after, approve(5, revision=7))
    promote = after.operation("promote")
    assert promote is not None
    assert "expected_revision" not in promote.spec.payload
    assert promote.pinned_revision == 7


def test_an_approval_given_ahead_pins_the_revision_once_the_step_is_reached() -> None:
    state = given(gated_submit(planned=False), approve(1, revision=7))
    dispatch = dispatched(decide(state, observed("reserve", 1, Outcome.SUCCEEDED)))
    assert dispatch.payload["expected_revision"] == 7


def test_a_step_that_names_its_own_revision_keeps_it() -> None:
    state = given(gated_submit(), observed("reserve", 1, Outcome.SUCCEEDED))
    dispatch = dispatched(decide(state, approve(5, revision=42)))
    assert dispatch.payload["expected_revision"] == 41
    assert dispatch.pinned_revision is None


def test_an_approval_without_a_revision_sends_the_payload_as_v1_did() -> None:
    # A command from before approvals carried one, or a preview that showed none (a
    # resource the provider keeps no revision of).
    dispatch = dispatched(decide(unplanned_waiting(), approve(5)))
    assert dispatch.payload == {"resource": "class-1", "user": "u6"}
    assert dispatch.pinned_revision is None
    assert "pinned_revision" not in dispatch.model_dump(mode="json")


def test_a_stale_answer_to_the_pinned_call_fails_the_step_stale_revision() -> None:
    state = given(
        gated_submit(planned=False),
        observed("reserve", 1, Outcome.SUCCEEDED),
        approve(5, revision=7),
    )
    stale = observed("promote", 1, Outcome.REJECTED).model_copy(
        update={"status_code": 409, "body": {"error": "stale_revision"}}
    )
    events = decide(state, stale)
    assert [e.type for e in events] == ["OperationFailed", "TransactionFailed"]
    assert events[1].reason == "stale_revision"  # type: ignore[union-attr]


def test_a_retry_on_a_fresh_approval_sends_the_first_attempts_payload() -> None:
    # One key, one payload: the fresh approval was shown revision 8, but attempt 1 went out
    # pinned to 7 under this key; attempt 2 must be the same request, or a provider that
    # binds keys to payloads refuses it (and would not recognise a first attempt that
    # applied). A resource that moved on is then refused as stale_revision.
    state = given(
        gated_submit(planned=False),
        observed("reserve", 1, Outcome.SUCCEEDED),
        approve(5, revision=7),
        observed("promote", 1, Outcome.UNKNOWN),
        request_review("promote", 1),
        approve(20, approval_id="ap-2", revision=8),
    )
    retried = decide(state, resolve("promote", 1, Resolution.RETRY, n=30))
    dispatch = dispatched(retried)
    assert dispatch.attempt == 2
    assert dispatch.payload["expected_revision"] == 7
    assert dispatch.pinned_revision == 7
