"""given/when/then for a step's call the dispatcher did not begin because the abort was
recorded first (issue 18, item 17): the transaction ends as an abort, whichever of the
dispatcher's answer and the abort's command the decider reads first."""

from support.txbuilders import abort, observed, submit

from events.aborted_before_call import ABORTED_BEFORE_CALL
from events.definition import TxStatus
from events.inputs import DeciderInput, OperationObserved, Outcome, Source
from events.transaction_events import Event, TransactionFailed
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state


def given(*inputs: DeciderInput) -> tuple[TransactionState, list[str], list[Event]]:
    state, types = initial_state("demo", "tx-1"), []
    events: list[Event] = []
    for message in inputs:
        state, envelopes = handle(state, message)
        types += [e.type for e in envelopes]
        events += [e.event() for e in envelopes]
    return state, types, events


def not_begun(action: str, source: Source = Source.RESPONSE) -> OperationObserved:
    return observed(action, 1, Outcome.REJECTED, source=source).model_copy(
        update={"error": ABORTED_BEFORE_CALL, "by_dispatcher": True}
    )


def failed(events: list[Event]) -> TransactionFailed:
    [end] = [e for e in events if isinstance(e, TransactionFailed)]
    return end


def test_an_irreversible_step_stopped_before_its_call_fails_the_transaction_as_aborted() -> None:
    state, types, events = given(
        submit(["charge"], uncompensated=("charge",)), abort(1), not_begun("charge")
    )
    assert state.status is TxStatus.FAILED
    assert "OperationConfirmed" not in types
    assert (failed(events).reason, failed(events).compensable) == ("aborted", ())
    assert types.count("TransactionAbortRequested") == 1  # the command's, not a second one


def test_the_dispatchers_answer_read_before_the_abort_command_is_the_abort() -> None:
    # The intake recorded the abort and died before producing it (or the command is late).
    state, types, events = given(submit(["charge"], uncompensated=("charge",)), not_begun("charge"))
    assert state.status is TxStatus.FAILED and failed(events).reason == "aborted"
    assert types[-3:] == ["TransactionAbortRequested", "OperationFailed", "TransactionFailed"]
    # The command, once it arrives, changes nothing.
    state, types, _ = given(
        submit(["charge"], uncompensated=("charge",)), not_begun("charge"), abort(1)
    )
    assert state.status is TxStatus.FAILED and types[-1] == "CommandIgnored"


def test_a_later_step_stopped_before_its_call_undoes_the_confirmed_ones() -> None:
    state, _, events = given(
        submit(["reserve", "charge"]),
        observed("reserve", 1, Outcome.SUCCEEDED),
        not_begun("charge"),
    )
    assert state.status is TxStatus.COMPENSATING
    assert (failed(events).reason, failed(events).compensable) == ("aborted", ("reserve",))


def test_the_same_words_from_anyone_but_the_dispatchers_answer_are_an_ordinary_rejection() -> None:
    from_lookup = not_begun("charge", Source.LOOKUP)
    not_ours = not_begun("charge").model_copy(update={"by_dispatcher": False})
    for rejection in (from_lookup, not_ours):
        _, types, events = given(submit(["charge"]), rejection)
        assert "TransactionAbortRequested" not in types
        assert failed(events).reason == "step_rejected"
