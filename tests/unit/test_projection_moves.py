"""The transitions the metrics count (projections.moves): read off the projection's own
views, so they follow the decider's rules and count each transition once."""

from datetime import datetime

from support.txbuilders import log_of, observed, request_review, submit

from events.definition import OpStatus, TxStatus
from events.envelope import Envelope
from events.inputs import Outcome, Source
from projections.moves import Moves
from projections.view import TxView, apply


def moves_of(log: list[Envelope], view: TxView | None = None) -> Moves:
    moves = Moves()
    for envelope in log:
        after = apply(view, envelope)
        moves.add(view, after)
        view = after
    return moves


def test_a_committed_transaction_counts_every_status_it_went_through_running_included() -> None:
    log = log_of(
        submit(["charge"], ("receipt",)),
        observed("charge", 1, Outcome.SUCCEEDED),
        observed("receipt", 1, Outcome.SUCCEEDED),
    )

    moves = moves_of(log)

    assert moves.transactions == {
        TxStatus.ACCEPTED: 1,
        TxStatus.RUNNING: 1,
        TxStatus.COMMITTED: 1,
    }
    assert moves.operations == {
        OpStatus.PENDING: 2,
        OpStatus.DISPATCHED: 2,
        OpStatus.CONFIRMED: 2,
    }
    # Accepted-to-committed, by the events' own times (the histogram's one observation).
    accepted, committed = log[0].occurred_at, log[-1].occurred_at
    assert moves.committed_after_s == [
        (datetime.fromisoformat(committed) - datetime.fromisoformat(accepted)).total_seconds()
    ]
    assert moves.reviews_opened == 0


def test_a_log_applied_twice_counts_once() -> None:
    log = log_of(submit(["charge"]), observed("charge", 1, Outcome.UNKNOWN, n=0))
    view = None
    for envelope in log:
        view = apply(view, envelope)

    again = moves_of(log, view)

    assert again == Moves()


def test_a_review_is_counted_when_it_opens_and_an_unknown_once_per_leg() -> None:
    log = log_of(
        submit(["charge"]),
        observed("charge", 1, Outcome.UNKNOWN, n=0),
        observed("charge", 1, Outcome.UNAVAILABLE, n=1, source=Source.LOOKUP),
        request_review("charge", 1),
    )

    moves = moves_of(log)

    assert moves.operations[OpStatus.UNKNOWN] == 1
    assert moves.operations[OpStatus.MANUAL_REVIEW] == 1
    assert moves.transactions[TxStatus.MANUAL_REVIEW] == 1
    assert moves.reviews_opened == 1
