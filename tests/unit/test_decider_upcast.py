"""Changelog records written by earlier versions of an operation's legs still restore.

The decider's state and its finished markers are serialised to the compacted changelog
(model_dump_json) and read back on restart (services.decider.restore). v1 kept an
operation's legs flat (status, attempt, comp_status, comp_attempt, open_review,
review_leg); v2 held them as values, the compensation leg under the name `undo`. These
literals were captured from that code, and are upcast (events.legs.upcast_legs) to
exactly the state the current code reaches through the same inputs.
"""

from support.txbuilders import compensate, observed, plan, submit

from events.definition import Leg, OpStatus
from events.inputs import DeciderInput, Outcome
from events.legs import LegState, LegStatus, upcast_legs
from services.decider.restore import parse_stored
from transactions.finished import FinishedTransaction, finish
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state

# reserve confirmed, its undo refused (a review open on the undo leg); charge failed.
COMPENSATION_IN_REVIEW: list[DeciderInput] = [
    submit(["reserve", "charge"]),
    observed("reserve", 1, Outcome.SUCCEEDED),
    observed("charge", 1, Outcome.REJECTED),
    plan("reserve"),
    compensate("reserve"),
    observed("reserve", 1, Outcome.REJECTED, leg=Leg.COMPENSATION),
]
COMPENSATED: list[DeciderInput] = [
    *COMPENSATION_IN_REVIEW[:-1],
    observed("reserve", 1, Outcome.SUCCEEDED, leg=Leg.COMPENSATION),
]

V1_STATE = (
    '{"tenant":"demo","tx_id":"tx-1","status":"manual_review","agent_id":"agent-1","finge'
    'rprint":"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff","operatio'
    'ns":[{"spec":{"action":"reserve","kind":"step","provider":"sandbox","operation":"pay'
    'ments.charge","payload":{"amount":100},"op_key":"rk1_5e3d06db10e564c6fd3408591d6b734'
    '3ddb92c97","compensation":{"operation":"payments.refund","payload":null},"compensati'
    'on_key":"rc1_e18a471ce4e9c7168744b9d0f206f2b272df03fd"},"status":"manual_review","at'
    'tempt":1,"remote_id":"ch_reserve","comp_status":"manual_review","comp_attempt":1,"op'
    'en_review":"rv_d27b24a5bf0eca4adf589d37","review_leg":"compensation"},{"spec":{"acti'
    'on":"charge","kind":"step","provider":"sandbox","operation":"payments.charge","paylo'
    'ad":{"amount":100},"op_key":"rk1_24e8bdd7d72ede184d4830e82d19ef6510f06ff5","compensa'
    'tion":{"operation":"payments.refund","payload":null},"compensation_key":"rc1_140a2e9'
    '769c71ab9ca65012ea10b4e7b8b2648e2"},"status":"failed","attempt":1,"remote_id":null,"'
    'comp_status":null,"comp_attempt":0,"open_review":null,"review_leg":null}],"aborting"'
    ':false,"plan":["reserve"],"seq":10,"last_hash":"2c5cc39b8a9dbbddc1d2ab162e3688872176'
    '6728555c7ed9faaceba5ca0b86d8","seen":["cmd-tx-1","compensate-reserve","obs-reserve-f'
    'orward-1-response-succeeded-0","plan-reserve","obs-reserve-compensation-1-response-r'
    'ejected-0","obs-charge-forward-1-response-rejected-0"]}'
)
V1_MARKER = (
    '{"kind":"finished","tenant":"demo","tx_id":"tx-1","status":"compensated","fingerprin'
    't":"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff","aborting":fal'
    'se,"plan":["reserve"],"seq":10,"last_hash":"db8a5764f7d2bd44e4cd0c5679384a24f6e24354'
    '7a0f85e0c751b721cd62f646","operations":[{"action":"reserve","kind":"step","op_key":"'
    'rk1_5e3d06db10e564c6fd3408591d6b7343ddb92c97","compensation_key":"rc1_e18a471ce4e9c7'
    '168744b9d0f206f2b272df03fd","status":"compensated","attempt":1,"comp_status":"confir'
    'med","comp_attempt":1},{"action":"charge","kind":"step","op_key":"rk1_24e8bdd7d72ede'
    '184d4830e82d19ef6510f06ff5","compensation_key":"rc1_140a2e9769c71ab9ca65012ea10b4e7b'
    '8b2648e2","status":"failed","attempt":1,"comp_status":null,"comp_attempt":0}]}'
)

V2_STATE = (
    '{"tenant":"demo","tx_id":"tx-1","status":"manual_review","agent_id":"agent-1","submi'
    'tted_by":null,"fingerprint":"fffffffffffffffffffffffffffffffffffffffffffffffffffffff'
    'fffffffff","operations":[{"spec":{"action":"reserve","kind":"step","provider":"sandb'
    'ox","operation":"payments.charge","payload":{"amount":100},"op_key":"rk1_5e3d06db10e'
    '564c6fd3408591d6b7343ddb92c97","compensation":{"operation":"payments.refund","payloa'
    'd":null},"compensation_key":"rc1_e18a471ce4e9c7168744b9d0f206f2b272df03fd"},"forward'
    '":{"status":"confirmed","attempt":1,"review":null},"undo":{"status":"manual_review",'
    '"attempt":1,"review":"rv_d27b24a5bf0eca4adf589d37"},"remote_id":"ch_reserve","pinned'
    '_revision":null},{"spec":{"action":"charge","kind":"step","provider":"sandbox","oper'
    'ation":"payments.charge","payload":{"amount":100},"op_key":"rk1_24e8bdd7d72ede184d48'
    '30e82d19ef6510f06ff5","compensation":{"operation":"payments.refund","payload":null},'
    '"compensation_key":"rc1_140a2e9769c71ab9ca65012ea10b4e7b8b2648e2"},"forward":{"statu'
    's":"failed","attempt":1,"review":null},"undo":null,"remote_id":null,"pinned_revision'
    '":null}],"aborting":false,"plan":["reserve"],"owner":null,"approvals":[],"seq":10,"l'
    'ast_hash":"2c5cc39b8a9dbbddc1d2ab162e36888721766728555c7ed9faaceba5ca0b86d8","seen":'
    '["cmd-tx-1","obs-reserve-forward-1-response-succeeded-0","obs-charge-forward-1-respo'
    'nse-rejected-0","plan-reserve","compensate-reserve","obs-reserve-compensation-1-resp'
    'onse-rejected-0"],"session_events":0,"refused":[]}'
)
V2_MARKER = (
    '{"kind":"finished","tenant":"demo","tx_id":"tx-1","status":"compensated","fingerprin'
    't":"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff","aborting":fal'
    'se,"plan":["reserve"],"seq":10,"last_hash":"db8a5764f7d2bd44e4cd0c5679384a24f6e24354'
    '7a0f85e0c751b721cd62f646","operations":[{"action":"reserve","kind":"step","op_key":"'
    'rk1_5e3d06db10e564c6fd3408591d6b7343ddb92c97","compensation_key":"rc1_e18a471ce4e9c7'
    '168744b9d0f206f2b272df03fd","forward":{"status":"confirmed","attempt":1,"review":nul'
    'l},"undo":{"status":"confirmed","attempt":1,"review":null}},{"action":"charge","kind'
    '":"step","op_key":"rk1_24e8bdd7d72ede184d4830e82d19ef6510f06ff5","compensation_key":'
    '"rc1_140a2e9769c71ab9ca65012ea10b4e7b8b2648e2","forward":{"status":"failed","attempt'
    '":1,"review":null},"undo":null}]}'
)


def same_but_head(
    restored: TransactionState | FinishedTransaction,
    reached: TransactionState | FinishedTransaction,
) -> bool:
    """Equal but for the chain head: the captured events were hashed in legacy-json, today's
    name their form (jcs, docs/canonical-form.md), which is part of what they hash."""
    return restored.model_copy(update={"last_hash": reached.last_hash}) == reached


def run(inputs: list[DeciderInput]) -> TransactionState:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, _ = handle(state, message)
    return state


def test_a_v1_state_restores_to_the_legs_the_decider_reaches_now() -> None:
    restored, _ = parse_stored(V1_STATE.encode())

    # v1 kept the ids as a set (no order); they restore into the window as written.
    expected = run(COMPENSATION_IN_REVIEW)
    assert isinstance(restored, TransactionState)
    assert set(restored.seen) == set(expected.seen)
    assert same_but_head(restored.model_copy(update={"seen": expected.seen}), expected)
    assert isinstance(restored, TransactionState)
    reserve, charge = restored.operations
    # v1 overwrote the forward status with the undo's progress: the forward leg was
    # confirmed (only a confirmed step is undone), and the review was the undo's.
    assert reserve.forward == LegState(status=LegStatus.CONFIRMED, attempt=1)
    assert reserve.compensation == LegState(
        status=LegStatus.MANUAL_REVIEW, attempt=1, review="rv_d27b24a5bf0eca4adf589d37"
    )
    assert reserve.status is OpStatus.MANUAL_REVIEW
    assert (charge.forward, charge.compensation) == (
        LegState(status=LegStatus.FAILED, attempt=1),
        None,
    )


# What markers keep since they answer late approvals and agents' commands as the live state
# did (transactions.finished): a marker written before restores without them.
JUDGED_LATE = ("agent_id", "submitted_by", "owner", "approvals", "session_events", "refused")


def written_before(marker: FinishedTransaction) -> FinishedTransaction:
    fields = FinishedTransaction.model_fields
    return marker.model_copy(update={name: fields[name].default for name in JUDGED_LATE})


def test_a_v1_finished_marker_restores_to_the_marker_written_now() -> None:
    restored, _ = parse_stored(V1_MARKER.encode())

    assert same_but_head(restored, written_before(finish(run(COMPENSATED))))
    assert isinstance(restored, FinishedTransaction)
    assert restored.operations[0].compensation == LegState(status=LegStatus.CONFIRMED, attempt=1)


def test_a_current_record_round_trips_unchanged() -> None:
    state = run(COMPENSATION_IN_REVIEW)
    assert TransactionState.model_validate_json(state.model_dump_json()) == state
    marker = finish(run(COMPENSATED))
    assert FinishedTransaction.model_validate_json(marker.model_dump_json()) == marker


def test_a_v1_review_of_the_forward_leg_stays_on_the_forward_leg() -> None:
    v1 = {"status": "manual_review", "attempt": 2, "comp_status": None, "comp_attempt": 0}
    v1 |= {"open_review": "rv_x", "review_leg": "forward"}

    assert upcast_legs(v1) == {
        "forward": {"status": "manual_review", "attempt": 2, "review": "rv_x"},
        "compensation": None,
    }


def test_a_v2_state_and_marker_restore_their_undo_leg_as_the_compensation_leg() -> None:
    state, _ = parse_stored(V2_STATE.encode())
    marker, _ = parse_stored(V2_MARKER.encode())

    assert same_but_head(state, run(COMPENSATION_IN_REVIEW))
    assert same_but_head(marker, written_before(finish(run(COMPENSATED))))
    assert isinstance(state, TransactionState)
    assert state.operations[0].compensation == LegState(
        status=LegStatus.MANUAL_REVIEW, attempt=1, review="rv_d27b24a5bf0eca4adf589d37"
    )
