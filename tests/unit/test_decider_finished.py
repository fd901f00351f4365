"""A finished transaction is kept as a compact marker; every late input is judged against
it exactly as against the full state, and nothing can start it again."""

from typing import Any

from hypothesis import given as for_all
from hypothesis import strategies as st
from support.approval_builders import (
    AGENT,
    GATE_NEVER_REACHED,
    RAN_ON_APPROVAL,
    approve,
)
from support.txbuilders import (
    abort,
    compensate,
    compensated_history,
    observed,
    plan,
    request_review,
    resolve,
    submit,
)

from events.definition import Compensation, Leg, OperationSpec, OpStatus, Resolution, TxStatus
from events.envelope import Envelope
from events.inputs import DeciderInput, Outcome, Source
from transactions.finished import (
    KEPT,
    MARKER_PREFIX,
    FinishedOperation,
    FinishedTransaction,
    finish,
    is_finished,
    keep,
    revive,
)
from transactions.state import OperationState, TransactionState
from transactions.transaction import handle, initial_state

COMMITTED: list[DeciderInput] = [
    submit(["reserve", "charge"], ("receipt",)),
    observed("reserve", 1, Outcome.SUCCEEDED),
    observed("charge", 1, Outcome.SUCCEEDED),
    observed("receipt", 1, Outcome.SUCCEEDED),
]
FAILED: list[DeciderInput] = [submit(["reserve"]), observed("reserve", 1, Outcome.REJECTED)]
COMPENSATED: list[DeciderInput] = compensated_history()
ABORTED: list[DeciderInput] = [
    submit(["reserve", "charge"]),
    abort(),
    observed("reserve", 1, Outcome.SUCCEEDED),
    plan("reserve"),
    compensate("reserve"),
    observed("reserve", 1, Outcome.SUCCEEDED, leg=Leg.COMPENSATION),
]
REVIEWED: list[DeciderInput] = [
    submit(["reserve"]),
    request_review("reserve", 1),
    resolve("reserve", 1, Resolution.APPLIED),
]
HISTORIES = {
    "committed": COMMITTED,
    "gated": RAN_ON_APPROVAL,
    "gate never reached": GATE_NEVER_REACHED,
    "failed": FAILED,
    "compensated": COMPENSATED,
    "aborted": ABORTED,
    "reviewed": REVIEWED,
}

# What can still arrive once a transaction has finished: retries, replays, late or
# stale observations, a saga that asks again after a restart, a late abort or review.
LATE: list[DeciderInput] = [
    submit(["reserve", "charge"], ("receipt",)).model_copy(update={"message_id": "cmd-again"}),
    abort(7),
    plan("reserve"),
    plan("charge"),
    compensate("reserve"),
    compensate("charge"),
    request_review("reserve", 1),
    resolve("reserve", 1, Resolution.APPLIED, n=5),
    resolve("reserve", 1, Resolution.RETRY, n=6),
    observed("reserve", 1, Outcome.SUCCEEDED, n=9),
    observed("reserve", 0, Outcome.SUCCEEDED, n=9, source=Source.WEBHOOK),
    observed("reserve", 2, Outcome.ABSENT, n=9, source=Source.LOOKUP),
    observed("charge", 1, Outcome.REJECTED, n=9),
    observed("charge", 1, Outcome.UNKNOWN, n=9),
    observed("reserve", 1, Outcome.SUCCEEDED, n=9, leg=Leg.COMPENSATION),
    observed("receipt", 1, Outcome.KEY_CONFLICT, n=9),
    observed("sorry", 1, Outcome.SUCCEEDED, n=9),
    observed("elsewhere", 1, Outcome.SUCCEEDED, n=9),
    approve(9),
    approve(9, approval_id="ap-2"),
    approve(9, approval_id="ap-3", approver=AGENT),
    approve(9, approval_id="ap-4", action="reserve"),
]

# A history's late inputs: up to five of them, each once.
LATE_RUNS = st.lists(st.sampled_from(LATE), max_size=5, unique_by=lambda m: m.message_id)


def run(inputs: list[DeciderInput]) -> TransactionState:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, _ = handle(state, message)
    return state


def bodies(envelopes: list[Envelope]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.data) for e in envelopes]


def test_every_history_here_ends_finished() -> None:
    for name, inputs in HISTORIES.items():
        assert is_finished(run(inputs)), name


@for_all(st.sampled_from(sorted(HISTORIES)), LATE_RUNS)
def test_late_inputs_are_judged_on_the_marker_as_on_the_full_state(
    history: str, late: list[DeciderInput]
) -> None:
    full = run(HISTORIES[history])
    marker = finish(full)
    for message in late:
        seen_before = message.message_id in full.seen
        full, expected = handle(full, message)
        revived, got = handle(revive(marker), message)
        if seen_before:
            # The marker forgets input ids: an input decided before the transaction
            # finished is judged again, and can only be recorded as ignored or refused.
            assert {e.type for e in got} <= {
                "CommandIgnored",
                "ObservationIgnored",
                "ApprovalRefused",
            }, got
        else:
            # The same events (the chain itself may be one event further on, after a
            # re-judged input above).
            assert bodies(got) == bodies(expected), (history, message)
        assert not any(e.type == "OperationDispatched" for e in got)
        assert is_finished(revived)
        marker = finish(revived)
    if not any(m.message_id in run(HISTORIES[history]).seen for m in late):
        assert (marker.seq, marker.last_hash) == (full.seq, full.last_hash)
        assert marker == finish(full)


def test_a_duplicate_submission_of_a_finished_transaction_starts_nothing() -> None:
    marker = finish(run(COMMITTED))
    for duplicate in (COMMITTED[0], LATE[0]):  # the same command, and a new one
        state, envelopes = handle(revive(marker), duplicate)
        assert envelopes == [] and finish(state) == marker


def test_the_marker_keeps_no_payload_and_no_input_ids() -> None:
    big = submit(["reserve", "charge"], ("receipt",))
    ops = tuple(op.model_copy(update={"payload": {"blob": "x" * 20_000}}) for op in big.operations)
    inputs: list[DeciderInput] = [big.model_copy(update={"operations": ops}), *COMMITTED[1:]]
    full = run(inputs)
    marker = finish(full).model_dump_json()
    assert len(full.model_dump_json()) > 60_000
    assert len(marker) < 1_200, marker
    assert "blob" not in marker and "cmd-tx-1" not in marker


def test_a_restore_tells_markers_from_full_states_by_their_first_bytes() -> None:
    # services.decider.restore indexes markers without parsing them: a full state taken
    # for a marker would be lost, a marker taken for a full state parsed in vain.
    for inputs in HISTORIES.values():
        full = run(inputs)
        assert finish(full).model_dump_json().encode().startswith(MARKER_PREFIX)
        assert not full.model_dump_json().encode().startswith(MARKER_PREFIX)
        assert not run(inputs[:1]).model_dump_json().encode().startswith(MARKER_PREFIX)


def test_the_decider_keeps_the_marker_exactly_when_the_transaction_is_finished() -> None:
    # `keep` judges is_finished once for the decider (finish's own check judged it again);
    # the prefixes hold states in review, notifying and compensating, which are not.
    for inputs in HISTORIES.values():
        state = initial_state("demo", "tx-1")
        for message in inputs:
            state, _ = handle(state, message)
            kept = keep(state)
            if is_finished(state):
                same_model(kept, finish(state))
            else:
                assert kept is state


def test_a_transaction_waiting_for_a_person_or_a_provider_is_not_finished() -> None:
    in_review = run([submit(["reserve"]), request_review("reserve", 1)])
    assert in_review.status is TxStatus.MANUAL_REVIEW and not is_finished(in_review)
    notifying = run(COMMITTED[:3])  # committed, the receipt still in flight
    assert notifying.status is TxStatus.COMMITTED and not is_finished(notifying)
    receipt_review = run([*COMMITTED[:3], request_review("receipt", 1)])
    assert receipt_review.status is TxStatus.COMMITTED
    assert receipt_review.operation("receipt").status is OpStatus.MANUAL_REVIEW  # type: ignore[union-attr]
    assert not is_finished(receipt_review)
    compensating = run(COMPENSATED[:5])
    assert compensating.status is TxStatus.COMPENSATING and not is_finished(compensating)


def kept_of(model: TransactionState | FinishedTransaction) -> dict[str, Any]:
    """The fields a marker keeps of the state as they are (the operations aside)."""
    return {name: getattr(model, name) for name in KEPT}


def finish_by_constructors(state: TransactionState) -> FinishedTransaction:
    """finish as it was written before it validated the marker in one call: one constructor
    call per model (the reference the one call must equal)."""
    return FinishedTransaction(
        **kept_of(state),
        operations=tuple(
            FinishedOperation(
                action=op.spec.action,
                kind=op.spec.kind,
                op_key=op.spec.op_key,
                compensation_key=op.spec.compensation_key,
                approval_required=op.spec.approval_required,
                forward=op.forward,
                compensation=op.compensation,
            )
            for op in state.operations
        ),
    )


def revive_by_constructors(marker: FinishedTransaction) -> TransactionState:
    """revive as it was written before, likewise."""
    return TransactionState(
        **kept_of(marker),
        operations=tuple(
            OperationState(
                spec=OperationSpec(
                    action=op.action,
                    kind=op.kind,
                    provider="",
                    operation="",
                    payload={},
                    op_key=op.op_key,
                    compensation=Compensation(operation="") if op.compensation_key else None,
                    compensation_key=op.compensation_key,
                    approval_required=op.approval_required,
                ),
                forward=op.forward,
                compensation=op.compensation,
            )
            for op in marker.operations
        ),
    )


def same_model(got: Any, expected: Any) -> None:
    """Equal, with the same bytes written (the changelog's) and the same fields set at
    every level (what a dump leaving unset fields out would show)."""
    assert got == expected
    assert got.model_dump_json() == expected.model_dump_json()
    assert got.model_dump(exclude_unset=True) == expected.model_dump(exclude_unset=True)


@for_all(st.sampled_from(sorted(HISTORIES)), LATE_RUNS)
def test_the_marker_and_the_revived_state_are_what_a_constructor_per_model_made(
    history: str, late: list[DeciderInput]
) -> None:
    # finish and revive validate each one dict: the decider runs both at every input of a
    # finished transaction, and a constructor call per nested model cost ~40 % more.
    state = run(HISTORIES[history])
    for message in [None, *late]:
        if message is not None:
            state, _ = handle(revive(finish(state)), message)
        marker = finish(state)
        same_model(marker, finish_by_constructors(state))
        same_model(revive(marker), revive_by_constructors(marker))
