"""The projection's fold: what the transactions/operations tables show for a log."""

from hypothesis import given
from hypothesis import strategies as st
from support.decider_scenarios import label, scenarios
from support.txbuilders import compensate, observed, plan, request_review, resolve, submit

from events.definition import Leg, OperationKind, OpStatus, Resolution, TxStatus
from events.envelope import Envelope
from events.inputs import DeciderInput, Outcome, Source
from events.keys import review_id
from events.legs import LegState, LegStatus
from projections.operation_row import operation_row, operation_view
from projections.table_writes import TABLES
from projections.view import TxView, ViewError, apply
from transactions.transaction import handle, initial_state, record


def log_of(*inputs: DeciderInput) -> list[Envelope]:
    state, log = initial_state("demo", "tx-1"), []
    for message in inputs:
        state, envelopes = handle(state, message)
        log += envelopes
    return log


def view_of(log: list[Envelope], start: TxView | None = None) -> TxView:
    view = start
    for envelope in log:
        view = apply(view, envelope)
    assert view is not None
    return view


def states(view: TxView) -> dict[str, tuple[OpStatus, int]]:
    return {op.action: (op.state, op.attempts) for op in view.operations}


def test_accepted_then_first_dispatch_runs_the_transaction() -> None:
    log = log_of(submit(["reserve", "charge"], ("receipt",)))

    accepted = apply(None, log[0])
    running = apply(accepted, log[1])

    assert accepted.status is TxStatus.ACCEPTED
    assert states(accepted) == {
        "reserve": (OpStatus.PENDING, 0),
        "charge": (OpStatus.PENDING, 0),
        "receipt": (OpStatus.PENDING, 0),
    }
    assert [(op.position, op.kind) for op in accepted.operations] == [
        (0, OperationKind.STEP),
        (1, OperationKind.STEP),
        (2, OperationKind.ON_COMMIT),
    ]
    assert running.status is TxStatus.RUNNING
    assert states(running)["reserve"] == (OpStatus.DISPATCHED, 1)
    assert running.last_seq == 2 and running.agent_id == "agent-1"


def test_committed_transaction_with_evidence_in_order() -> None:
    log = log_of(
        submit(["charge"], ("receipt",)),
        observed("charge", 1, Outcome.UNKNOWN, n=0),
        observed("charge", 1, Outcome.SUCCEEDED, n=1, source=Source.LOOKUP),
    )

    view = view_of(log)

    assert view.status is TxStatus.COMMITTED
    assert states(view) == {
        "charge": (OpStatus.CONFIRMED, 1),
        "receipt": (OpStatus.DISPATCHED, 1),
    }
    charge = view.operations[0]
    assert charge.remote_id == "ch_charge"
    assert [(e["event"], e["outcome"], e["source"]) for e in charge.evidence] == [
        ("OperationUnknown", "unknown", "response"),
        ("OperationConfirmed", "succeeded", "lookup"),
    ]
    assert view.created_at < view.updated_at == charge.updated_at


def test_rejected_step_fails_the_transaction() -> None:
    view = view_of(log_of(submit(["charge"]), observed("charge", 1, Outcome.REJECTED)))

    assert view.status is TxStatus.FAILED
    assert states(view) == {"charge": (OpStatus.FAILED, 1)}
    assert view.operations[0].evidence[0]["event"] == "OperationFailed"


def test_key_conflict_goes_to_manual_review_with_the_reason() -> None:
    view = view_of(log_of(submit(["charge"]), observed("charge", 1, Outcome.KEY_CONFLICT)))

    assert view.status is TxStatus.MANUAL_REVIEW
    assert states(view) == {"charge": (OpStatus.MANUAL_REVIEW, 1)}
    assert view.operations[0].evidence[0]["reason"] == "idempotency_key_reused"


def test_a_retry_after_proven_absence_counts_the_attempt() -> None:
    view = view_of(
        log_of(
            submit(["charge"]),
            observed("charge", 1, Outcome.UNKNOWN, n=0),
            observed("charge", 1, Outcome.ABSENT, n=1, source=Source.LOOKUP),
        )
    )

    assert states(view) == {"charge": (OpStatus.DISPATCHED, 2)}
    assert [e["event"] for e in view.operations[0].evidence] == [
        "OperationUnknown",
        "EvidenceRecorded",
    ]


def test_stale_observations_are_kept_as_evidence_without_moving_state() -> None:
    view = view_of(
        log_of(
            submit(["charge"]),
            observed("charge", 1, Outcome.UNKNOWN, n=0),
            observed("charge", 1, Outcome.ABSENT, n=1, source=Source.LOOKUP),
            observed("charge", 1, Outcome.SUCCEEDED, n=2),
        )
    )

    assert states(view) == {"charge": (OpStatus.DISPATCHED, 2)}
    assert view.operations[0].evidence[-1]["event"] == "ObservationIgnored"


def test_replaying_any_prefix_changes_nothing() -> None:
    log = log_of(
        submit(["reserve", "charge"], ("receipt",)),
        observed("reserve", 1, Outcome.SUCCEEDED, n=0),
        observed("charge", 1, Outcome.UNKNOWN, n=1),
        observed("charge", 1, Outcome.SUCCEEDED, n=2, source=Source.WEBHOOK),
    )
    full = view_of(log)

    for cut in range(len(log) + 1):
        assert view_of(log[:cut], start=full) is full


def test_an_event_before_acceptance_is_refused() -> None:
    log = log_of(submit(["charge"]))

    try:
        apply(None, log[1])
    except ViewError as exc:
        assert "before TransactionAccepted" in str(exc)
    else:
        raise AssertionError("a view cannot start with a dispatch")


def logs() -> st.SearchStrategy[list[Envelope]]:
    """The decider's logs for the full decider scenarios: aborts, compensations and reviews
    of either leg, not only forward answers (tests/support/decider_scenarios.py)."""
    return scenarios().map(lambda inputs: log_of(*inputs))


@given(logs())
def test_applying_the_log_twice_equals_applying_it_once(log: list[Envelope]) -> None:
    once = view_of(log)

    assert view_of(log + log) == once
    assert view_of(log, start=once) == once
    assert once.last_seq == len(log)


@given(logs(), st.data())
def test_redelivering_a_prefix_mid_stream_changes_nothing(
    log: list[Envelope], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(1, len(log)))
    back = data.draw(st.integers(0, cut))

    assert view_of(log[:cut] + log[back:]) == view_of(log)


@given(logs())
def test_the_view_agrees_with_the_decider(log: list[Envelope]) -> None:
    # At every event, not only at the end: a state the view shows for a while (a review
    # resolved mid-compensation) may be overwritten by the next events.
    state, view = initial_state("demo", "tx-1"), None
    for envelope in log:
        state = record(state, envelope)
        view = apply(view, envelope)

        assert view.status is state.status
        assert [(op.action, op.state, op.attempts, op.remote_id) for op in view.operations] == [
            (op.spec.action, op.status, op.forward.attempt, op.remote_id) for op in state.operations
        ]
    label(state, log)


def test_the_compensation_and_its_key_are_projected_leg_by_leg() -> None:
    log = log_of(
        submit(["reserve", "charge"]),
        observed("reserve", 1, Outcome.SUCCEEDED, n=0),
        observed("charge", 1, Outcome.REJECTED, n=1),
        plan("reserve"),
        compensate("reserve"),
    )
    dispatched = view_of(log)
    reserve = dispatched.operations[0]
    assert reserve.compensation_key == submit(["reserve"]).operations[0].compensation_key
    assert (reserve.state, reserve.compensation) == (
        OpStatus.COMPENSATING,
        LegState(status=LegStatus.DISPATCHED, attempt=1),
    )

    unknown = view_of(
        log_of(
            submit(["reserve", "charge"]),
            observed("reserve", 1, Outcome.SUCCEEDED, n=0),
            observed("charge", 1, Outcome.REJECTED, n=1),
            plan("reserve"),
            compensate("reserve"),
            observed("reserve", 1, Outcome.UNKNOWN, n=2, leg=Leg.COMPENSATION),
        )
    )
    assert unknown.operations[0].compensation == LegState(status=LegStatus.UNKNOWN, attempt=1)
    assert unknown.operations[0].state is OpStatus.COMPENSATING

    done = view_of(
        log_of(
            submit(["reserve", "charge"]),
            observed("reserve", 1, Outcome.SUCCEEDED, n=0),
            observed("charge", 1, Outcome.REJECTED, n=1),
            plan("reserve"),
            compensate("reserve"),
            observed("reserve", 1, Outcome.SUCCEEDED, n=2, leg=Leg.COMPENSATION),
        )
    )
    assert (done.operations[0].state, done.operations[0].compensation) == (
        OpStatus.COMPENSATED,
        LegState(status=LegStatus.CONFIRMED, attempt=1),
    )
    assert done.status is TxStatus.COMPENSATED


def test_a_review_is_opened_then_resolved_with_who_and_why() -> None:
    inputs: list[DeciderInput] = [
        submit(["charge"]),
        observed("charge", 1, Outcome.UNKNOWN, n=0),
        request_review("charge", 1),
    ]
    opened = view_of(log_of(*inputs))
    [review] = opened.reviews
    rid = review_id("demo", "tx-1", "charge", "forward", 1)
    assert (review.review_id, review.state, review.leg, review.attempt) == (
        rid,
        "open",
        Leg.FORWARD,
        1,
    )
    assert review.op_key == opened.operations[0].op_key
    assert review.reason == "lookup_budget_exhausted" and review.resolved_at is None
    assert opened.operations[0].open_review_id == rid
    assert opened.status is TxStatus.MANUAL_REVIEW

    resolved = view_of(log_of(*inputs, resolve("charge", 1, Resolution.APPLIED, n=5)))
    [closed] = resolved.reviews
    assert (closed.state, closed.resolution, closed.actor) == (
        "resolved",
        Resolution.APPLIED,
        "ops@example.com",
    )
    assert closed.note == "checked with the provider" and closed.resolved_at is not None
    assert closed.created_at == review.created_at
    assert resolved.operations[0].open_review_id is None
    assert resolved.operations[0].state is OpStatus.CONFIRMED
    assert resolved.status is TxStatus.COMMITTED


def test_a_review_of_the_compensation_names_the_compensation_key() -> None:
    view = view_of(
        log_of(
            submit(["reserve", "charge"]),
            observed("reserve", 1, Outcome.SUCCEEDED, n=0),
            observed("charge", 1, Outcome.REJECTED, n=1),
            plan("reserve"),
            compensate("reserve"),
            observed("reserve", 1, Outcome.REJECTED, n=2, leg=Leg.COMPENSATION),
        )
    )

    [review] = view.reviews
    reserve = view.operations[0]
    assert (review.leg, review.op_key, review.reason) == (
        Leg.COMPENSATION,
        reserve.compensation_key,
        "compensation_rejected",
    )
    assert reserve.compensation is not None
    assert (reserve.compensation.status, reserve.open_review_id) == (
        LegStatus.MANUAL_REVIEW,
        review.review_id,
    )


@given(logs())
def test_the_legs_and_reviews_are_the_deciders_and_survive_their_row(log: list[Envelope]) -> None:
    state, view = initial_state("demo", "tx-1"), None
    columns = TABLES["operations"].columns
    for envelope in log:
        state = record(state, envelope)
        view = apply(view, envelope)

        assert [
            (op.compensation_key, op.forward, op.compensation, op.state, op.open_review_id)
            for op in view.operations
        ] == [
            (op.spec.compensation_key, op.forward, op.compensation, op.status, op.open_review)
            for op in state.operations
        ]
        # The writer reloads a view from its rows between batches (projections.writer):
        # the storage columns must give back the very legs the decider holds.
        for op in view.operations:
            row = dict(zip(columns, operation_row(view.tenant, view.tx_id, op), strict=True))
            assert operation_view(row) == op
        assert {r.review_id for r in view.reviews if r.state == "open"} == {
            op.open_review for op in state.operations if op.open_review
        }
