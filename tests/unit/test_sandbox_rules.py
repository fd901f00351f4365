"""Pure parts of the sandbox provider: fingerprints, refusal rules, fault consumption."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.devtools.sandbox.catalog import Operation, refusal_for
from services.devtools.sandbox.faults import FaultBoard, FaultMode, FaultSpec
from services.devtools.sandbox.fingerprint import canonical_json, payload_fingerprint


def test_fingerprint_is_pinned_and_ignores_key_order() -> None:
    # Frozen: changing the derivation would turn every stored key into a false 409.
    payload = {"currency": "eur", "amount": 1250, "note": "café"}
    assert canonical_json(payload) == '{"amount":1250,"currency":"eur","note":"café"}'
    assert payload_fingerprint(payload) == payload_fingerprint(dict(reversed(payload.items())))
    assert payload_fingerprint(payload) == (
        "2328fea637be085ebb9aa8dd1297ec929814e31ca840758f8ba16bf2e37defd5"
    )


def test_refusals_only_for_their_operation() -> None:
    declined = refusal_for(Operation.PAYMENTS_CHARGE, {"customer": "cus_decline"})
    assert declined is not None and (declined.status_code, declined.error) == (402, "card_declined")
    assert refusal_for(Operation.PAYMENTS_REFUND, {"customer": "cus_decline"}) is None
    stock = refusal_for(Operation.INVENTORY_RESERVE, {"sku": "sku-out-of-stock"})
    assert stock is not None and (stock.status_code, stock.error) == (422, "out_of_stock")
    assert refusal_for(Operation.INVENTORY_RELEASE, {"sku": "sku-out-of-stock"}) is None


def test_routes_and_prefixes() -> None:
    assert Operation.PAYMENTS_CHARGE.path == "/v1/payments/charge"
    assert {o.id_prefix for o in Operation} == {"ch", "rf", "rs", "rl", "em", "wp", "wr", "rd"}


def test_call_fault_is_consumed_times_then_gone() -> None:
    board = FaultBoard()
    board.arm(FaultSpec(operation=Operation.EMAIL_SEND, mode=FaultMode.DELAY, times=2))

    assert board.take_call_fault(Operation.PAYMENTS_CHARGE) is None
    assert board.take_lookup_fault(None) is None
    first = board.take_call_fault(Operation.EMAIL_SEND)
    second = board.take_call_fault(Operation.EMAIL_SEND)
    assert first is not None and second is not None
    assert board.take_call_fault(Operation.EMAIL_SEND) is None
    assert board.armed() == []


def test_lookup_fault_for_an_operation_hits_it_and_unknown_keys_only() -> None:
    board = FaultBoard()
    board.arm(
        FaultSpec(operation=Operation.PAYMENTS_CHARGE, mode=FaultMode.LOOKUP_UNAVAILABLE, times=2)
    )

    assert board.take_lookup_fault(Operation.EMAIL_SEND) is None
    assert board.take_call_fault(Operation.PAYMENTS_CHARGE) is None
    assert board.take_lookup_fault(Operation.PAYMENTS_CHARGE) is not None
    assert board.take_lookup_fault(None) is not None
    assert board.take_lookup_fault(None) is None


def test_call_faults_need_an_operation() -> None:
    with pytest.raises(ValidationError, match="'operation' is required"):
        FaultSpec.model_validate({"mode": "pending"})
    assert FaultSpec.model_validate({"mode": "lookup_unavailable"}).operation is None
