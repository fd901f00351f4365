"""The pure parts of issue 12: the precondition judge, what a second body would change,
the operation record's fold, and the JSON log line's ids."""

import json
import logging

from events.definition import OperationKind, OperationSpec
from events.inputs import Outcome
from services.intake.immutable import changes
from services.intake.operation_record import operation_record
from services.logging_json import JsonFormatter, bind, current_ids, log_context
from services.providers.preconditions import balance_needed, judge_balance

REFUND = {"amount": 600, "charge": "ch_1"}


def test_a_refund_that_no_longer_fits_its_balance_is_stopped_with_the_balance() -> None:
    assert balance_needed("payments.refund", REFUND) == "ch_1"
    assert balance_needed("payments.charge", REFUND) is None
    fits = {"refundable": 600, "revoked": False}
    assert judge_balance(REFUND, 200, fits) is None
    stopped = judge_balance(REFUND, 200, {"refundable": 500, "revoked": False})
    assert stopped is not None and stopped.outcome is Outcome.REJECTED
    assert stopped.error is not None and "precondition_failed" in stopped.error
    assert stopped.body == {
        "precondition": "refundable_balance",
        "balance": {"refundable": 500, "revoked": False},
    }
    revoked = judge_balance(REFUND, 200, {"refundable": 900, "revoked": True})
    assert revoked is not None and "revoked" in (revoked.error or "")
    # The provider does not know the charge: nothing to hold the refund to.
    assert judge_balance(REFUND, 404, {}) is None
    # No answer proves nothing either way: unknown, never a refusal.
    unanswered = judge_balance(REFUND, 503, {"error": "down"})
    assert unanswered is not None and unanswered.outcome is Outcome.UNKNOWN


def _spec(amount: int) -> OperationSpec:
    return OperationSpec(
        action="partial_refund",
        kind=OperationKind.STEP,
        provider="sandbox",
        operation="payments.refund",
        payload={"amount": amount},
        op_key="rk1_a",
    )


def test_a_second_body_names_what_it_would_change() -> None:
    stored = [_spec(500).model_dump(mode="json")]
    assert changes(stored, [_spec(700)]) == "partial_refund: payload.amount 500 -> 700"
    assert changes(stored, [_spec(500)]) == "the agent or the notifications differ"


def test_the_record_folds_dispatches_observations_and_successions() -> None:
    spec = _spec(500).model_dump(mode="json")
    events = [
        {
            "seq": 1,
            "type": "TransactionAccepted",
            "occurred_at": "t1",
            "data": {"agent_id": "A", "session_id": "s-A", "operations": [spec]},
        },
        {
            "seq": 2,
            "type": "OperationDispatched",
            "occurred_at": "t2",
            "data": {
                "action": "partial_refund",
                "op_key": "rk1_a",
                "attempt": 1,
                "lookup_first": False,
                "provider": "sandbox",
                "operation": "payments.refund",
                "payload": {"amount": 500},
            },
        },
        {
            "seq": 3,
            "type": "TransactionClaimed",
            "occurred_at": "t3",
            "data": {"agent_id": "B", "session_id": "s-B", "lease_expires_at": "t9"},
        },
        {
            "seq": 4,
            "type": "OperationConfirmed",
            "occurred_at": "t4",
            "data": {"action": "partial_refund", "attempt": 1, "evidence": {"outcome": "ok"}},
        },
        {
            "seq": 5,
            "type": "OperationConfirmed",
            "occurred_at": "t5",
            "data": {"action": "other", "attempt": 1},
        },
    ]
    record = operation_record("rk1_a", "partial_refund", events)
    assert record is not None
    assert record["approved"]["payload"] == {"amount": 500}
    assert record["attempts"] == 1 and len(record["dispatches"]) == 1
    assert [o["seq"] for o in record["observations"]] == [4]
    assert record["owner"]["session_id"] == "s-B"
    assert [(s["from"]["session_id"], s["to"]["session_id"]) for s in record["successions"]] == [
        ("s-A", "s-B")
    ]
    assert operation_record("rk1_a", "missing", events) is None


def test_a_log_line_carries_the_ids_bound_around_it() -> None:
    formatter = JsonFormatter("dispatcher")

    def line(message: str) -> dict[str, object]:
        record = logging.LogRecord("x", logging.INFO, __file__, 1, message, None, None)
        parsed: dict[str, object] = json.loads(formatter.format(record))
        return parsed

    with log_context(tx_id="tx-1", op_key="rk1_a", attempt=2):
        inside = line("called")
    assert (inside["tx_id"], inside["op_key"], inside["attempt"]) == ("tx-1", "rk1_a", 2)
    assert inside["process"] == "dispatcher" and inside["msg"] == "called"
    assert "op_key" not in line("after")  # unbound once the unit of work ends


def test_ids_bound_inside_a_block_end_with_it_and_none_unbinds_nothing() -> None:
    """A block with no ids still scopes what `bind` adds inside it (the intake's request
    block binds tx_id midway), a None id leaves the outer one, and an error ends the block."""
    with log_context(tx_id="tx-1"):
        with log_context():
            bind(op_key="rk1_a")
            assert dict(current_ids()) == {"tx_id": "tx-1", "op_key": "rk1_a"}
        assert dict(current_ids()) == {"tx_id": "tx-1"}
        with log_context(tx_id=None, attempt=3):
            assert dict(current_ids()) == {"tx_id": "tx-1", "attempt": 3}
        try:
            with log_context(attempt=4):
                raise KeyError("x")
        except KeyError:
            pass
        assert dict(current_ids()) == {"tx_id": "tx-1"}
    assert dict(current_ids()) == {}
