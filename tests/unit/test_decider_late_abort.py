"""given/when/then for an abort that meets an effect with no undo (issue 18, item 17):
the transaction never says `failed` while that effect stands."""

from support.txbuilders import abort, observed, submit

from events.definition import TxStatus
from events.inputs import DeciderInput, Outcome
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state


def given(*inputs: DeciderInput) -> tuple[TransactionState, list[str]]:
    state, types = initial_state("demo", "tx-1"), []
    for message in inputs:
        state, envelopes = handle(state, message)
        types += [e.type for e in envelopes]
    return state, types


def test_an_abort_after_the_dispatch_of_an_irreversible_only_step_commits_and_says_why() -> None:
    # Given a one-step transaction whose step has no undo, dispatched; when it is aborted
    # and the step is then confirmed:
    state, types = given(
        submit(["charge"], uncompensated=("charge",)),
        abort(1),
        observed("charge", 1, Outcome.SUCCEEDED),
    )
    # Then the effect stands and the status says so, never `failed`.
    assert state.status is TxStatus.COMMITTED
    assert "TransactionFailed" not in types
    assert types[-2:] == ["CommandIgnored", "TransactionCommitted"]


def test_an_abort_with_an_irreversible_effect_and_steps_not_run_goes_to_a_person() -> None:
    state, types = given(
        submit(["charge", "reserve"], uncompensated=("charge",)),
        abort(1),
        observed("charge", 1, Outcome.SUCCEEDED),
    )
    assert state.status is TxStatus.MANUAL_REVIEW
    assert "TransactionFailed" not in types and "TransactionCommitted" not in types


def test_an_abort_with_only_undoable_effects_still_fails_and_compensates() -> None:
    state, types = given(submit(["charge"]), abort(1), observed("charge", 1, Outcome.SUCCEEDED))
    assert state.status is TxStatus.COMPENSATING
    assert types[-1] == "TransactionFailed"
