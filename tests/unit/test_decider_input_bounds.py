"""given/when/then for what a live transaction keeps of its inputs (issue 18, item 4):
fresh session ids by the thousand must not push its state past the decider's record
bound, and an operator's command must still get through."""

from datetime import timedelta

from support.txbuilders import T0, observed, request_review, resolve, submit

from events.definition import Resolution, TxStatus
from events.inputs import AbortTransaction, DeciderInput, Outcome, ReleaseTransaction
from events.transaction_events import CommandRefused
from services.decider.runtime import MAX_RECORD_BYTES
from transactions.input_bounds import MAX_SESSION_EVENTS, SEEN_WINDOW, TOO_MANY_COMMANDS
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state


def given(*inputs: DeciderInput) -> TransactionState:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, _ = handle(state, message)
    return state


def fenced_abort(n: int) -> AbortTransaction:
    session = f"{n:04d}" + "x" * 124  # the longest session id the intake takes
    return AbortTransaction(
        message_id=f"abort-{session}",
        tenant="demo",
        tx_id="tx-1",
        actor="intruder",
        reason="freeze it",
        issued_at=T0 + timedelta(seconds=1),
        agent_id="intruder",
        session_id=session,
    )


def in_review() -> TransactionState:
    owned = submit(["charge"]).model_copy(update={"session_id": "s-A", "lease_s": 60})
    return given(
        owned,
        observed("charge", 1, Outcome.UNKNOWN),
        request_review("charge", 1),
    )


def test_thousands_of_fenced_commands_leave_the_state_small_and_the_operator_heard() -> None:
    state = in_review()
    assert state.status is TxStatus.MANUAL_REVIEW
    refusals: list[str] = []
    for n in range(1_700):
        state, envelopes = handle(state, fenced_abort(n))
        refusals += [e.event().model_dump().get("reason", "") for e in envelopes]

    # Then: the state stays far under the bound, each refusal was recorded until the cap,
    # the cap once, and nothing after it.
    assert len(state.model_dump_json()) < MAX_RECORD_BYTES // 8
    assert len(state.seen) == SEEN_WINDOW
    assert refusals == ["fenced"] * MAX_SESSION_EVENTS + [TOO_MANY_COMMANDS]
    # And the operator's resolution is decided.
    state, envelopes = handle(state, resolve("charge", 1, Resolution.APPLIED))
    assert "ReviewResolved" in [e.type for e in envelopes]
    assert state.status is TxStatus.COMMITTED


def test_the_owner_is_heard_past_the_cap() -> None:
    state = in_review()
    for n in range(MAX_SESSION_EVENTS + 5):
        state, _ = handle(state, fenced_abort(n))
    owner_abort = fenced_abort(0).model_copy(
        update={"message_id": "owner-abort", "agent_id": "agent-1", "session_id": "s-A"}
    )
    _, envelopes = handle(state, owner_abort)
    assert [e.type for e in envelopes][:1] == ["TransactionAbortRequested"]


def test_a_redelivered_input_inside_the_window_changes_nothing() -> None:
    state = in_review()
    state, first = handle(state, fenced_abort(1))
    again, envelopes = handle(state, fenced_abort(1))
    assert first and envelopes == [] and again == state


def again(command: AbortTransaction, n: int) -> AbortTransaction:
    """The same session's same command under a fresh message id."""
    return command.model_copy(update={"message_id": f"{command.message_id}-again-{n}"})


def release_by(abort: AbortTransaction) -> ReleaseTransaction:
    return ReleaseTransaction(
        message_id=f"release-{abort.session_id}",
        tenant="demo",
        tx_id="tx-1",
        agent_id=abort.agent_id or "",
        session_id=abort.session_id or "",
        issued_at=abort.issued_at,
    )


def refusals_of(state: TransactionState, *inputs: DeciderInput) -> list[tuple[str, str, str]]:
    found = []
    for message in inputs:
        state, envelopes = handle(state, message)
        for envelope in envelopes:
            event = envelope.event()
            if isinstance(event, CommandRefused):
                found.append((event.session_id or "", event.command, event.reason))
    return found


def test_a_session_that_repeats_a_refused_command_is_refused_once() -> None:
    # Given a fenced session whose abort was refused,
    first = fenced_abort(1)
    # when it sends the same abort again and again under fresh message ids, then a release,
    # and another session sends the same abort,
    other = fenced_abort(2)
    found = refusals_of(
        in_review(), first, *(again(first, n) for n in range(100)), release_by(first), other
    )
    # then each (session, command, reason) is recorded once, the first time, as before.
    assert found == [
        (first.session_id, "AbortTransaction", "fenced"),
        (first.session_id, "ReleaseTransaction", "fenced"),
        (other.session_id, "AbortTransaction", "fenced"),
    ]


def test_the_record_of_refusals_stays_bounded() -> None:
    state = in_review()
    for n in range(1_700):
        state, _ = handle(state, fenced_abort(n))
        state, _ = handle(state, again(fenced_abort(n), n))
    assert len(state.refused) <= MAX_SESSION_EVENTS
    assert len(state.model_dump_json()) < MAX_RECORD_BYTES // 8


def test_an_operators_abort_naming_a_session_is_judged_past_the_cap_not_dropped() -> None:
    # A person is never capped: naming a session other than the owner's, the operator's
    # abort is fenced as below the cap (recorded), not dropped unheard.
    state = in_review()
    for n in range(MAX_SESSION_EVENTS + 5):
        state, _ = handle(state, fenced_abort(n))
    by_operator = fenced_abort(9_999).model_copy(update={"operator": "ops-key"})
    _, envelopes = handle(state, by_operator)
    assert [e.event().model_dump().get("reason") for e in envelopes] == ["fenced"]
