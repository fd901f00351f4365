"""The owner and the count of commands from agent sessions a transaction's row holds
(projections.view, projections.session_row) are the decider's own at every event, and come
back from their columns as they went in; a row moved on without them is unknown, and stays
so in the fold, so the intake folds that transaction's chain instead of trusting it."""

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st
from support.txbuilders import T0, log_of, submit

from events.envelope import Envelope
from events.inputs import AbortTransaction, ClaimTransaction, DeciderInput, ReleaseTransaction
from projections.session_row import session_columns, session_fields
from projections.view import TxView, apply
from transactions.transaction import initial_state, record

LEASE_S = 300
# (what, which session, seconds after the previous command): few sessions, so that claims
# take over, owners release and renew, and fenced sessions are refused.
Command = tuple[str, int, int]
commands = st.lists(
    st.tuples(
        st.sampled_from(["claim", "release", "abort"]),
        st.integers(0, 4),
        st.integers(0, 2 * LEASE_S),
    ),
    max_size=30,
)


def session_log(drawn: list[Command]) -> list[Envelope]:
    first = submit(["charge"]).model_copy(update={"session_id": "s-0", "lease_s": LEASE_S})
    inputs: list[DeciderInput] = [first]
    at = T0
    for i, (what, s, after) in enumerate(drawn):
        at += timedelta(seconds=after)
        who = {"tenant": "demo", "tx_id": "tx-1", "agent_id": f"agent-{s}", "session_id": f"s-{s}"}
        if what == "claim":
            inputs.append(
                ClaimTransaction(message_id=f"c{i}", lease_s=LEASE_S, issued_at=at, **who)
            )
        elif what == "release":
            inputs.append(ReleaseTransaction(message_id=f"r{i}", issued_at=at, **who))
        else:
            inputs.append(
                AbortTransaction(
                    message_id=f"a{i}", actor="agent", reason="stop", issued_at=at, **who
                )
            )
    return log_of(*inputs)


def row_of(view: TxView) -> dict[str, object]:
    owner, session_events, session_seq = session_columns(view)
    return {
        "last_seq": view.last_seq,
        "owner": owner,
        "session_events": session_events,
        "session_seq": session_seq,
    }


@given(commands)
def test_the_rows_owner_and_count_are_the_deciders_and_survive_their_columns(
    drawn: list[Command],
) -> None:
    state, view = initial_state("demo", "tx-1"), None
    for envelope in session_log(drawn):
        state = record(state, envelope)
        view = apply(view, envelope)

        assert (view.owner, view.session_events) == (state.owner, state.session_events)
        # The writer and the intake read them back from the row (projections.writer,
        # services.intake.tenant_store).
        assert session_fields(row_of(view)) == {
            "owner": view.owner,
            "session_events": view.session_events,
        }


def test_a_row_moved_on_without_them_is_unknown_and_stays_so() -> None:
    log = session_log([("claim", 1, LEASE_S + 1), ("release", 1, 1)])
    view = None
    for envelope in log[:-1]:
        view = apply(view, envelope)
    assert view is not None and view.session_events == 1
    # A projector of the previous release wrote the last event: the row's last_seq moved,
    # its session columns did not.
    stale = {**row_of(view), "last_seq": view.last_seq + 1}
    assert session_fields(stale) == {"owner": None, "session_events": None}

    unknown = view.model_copy(update=session_fields(stale))
    moved = apply(unknown, log[-1])
    assert (moved.owner, moved.session_events) == (None, None)
    assert session_columns(moved) == (None, None, None)
