"""The undo a step allows and the payload schemas (issue 18, items 1, 2 and 9): pure rules,
given/when/then."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.catalogs import SANDBOX
from support.txbuilders import compensate, observed, plan, submit

from events.catalog import SideEffect
from events.definition import Compensation, Leg
from events.inputs import Outcome
from events.payload_check import payload_problem
from events.policy import AgentPolicy, PolicyDocument, Quota
from events.transaction_events import OperationDispatched
from services.governance.gate import Named, amount_of, counts_amount, submission_refusal
from services.intake.submission import SubmissionRefused, SubmissionRequest, check
from transactions.transaction import handle, initial_state


def body(step: dict[str, Any], *more: dict[str, Any]) -> SubmissionRequest:
    return SubmissionRequest.model_validate(
        {"tx_id": "tx-1", "agent_id": "agent-1", "steps": [step, *more]}
    )


def reserve(compensation: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "action": "reserve",
        "provider": "sandbox",
        "operation": "inventory.reserve",
        "payload": {"sku": "sku-1", "qty": 1},
        "compensation": compensation,
    }


def charge(amount: Any = 1299) -> dict[str, Any]:
    return {
        "action": "charge",
        "provider": "sandbox",
        "operation": "payments.charge",
        "payload": {"amount": amount, "currency": "usd", "customer": "cus_1"},
        "compensation": {"operation": "payments.refund"},
    }


def refusal_code(submission: SubmissionRequest, required: frozenset[str] | None = None) -> str:
    with pytest.raises(SubmissionRefused) as refused:
        if required is None:
            check(submission, SANDBOX)
        else:
            check(submission, SANDBOX, required)
    return refused.value.code


def test_the_catalog_declares_the_undos_of_the_issue() -> None:
    undo = SANDBOX.compensation_of
    assert undo("sandbox", "inventory.reserve") == "inventory.release"
    assert undo("sandbox", "payments.charge") == "payments.refund"
    assert undo("sandbox", "waitlist.promote") == "waitlist.restore"
    for operation in ("email.send", "records.delete", "payments.refund"):
        assert undo("sandbox", operation) is None
    # Every declared undo is an operation of its provider, and none is destructive.
    for provider, info in SANDBOX:
        if info.compensation is not None:
            declared = SANDBOX.info(provider, info.compensation)
            assert declared is not None and declared.side_effect is not SideEffect.DESTRUCTIVE


def test_given_a_reserve_when_its_undo_is_a_charge_then_it_is_refused() -> None:
    big = {"operation": "payments.charge", "payload": {"amount": 5_000_000}}
    assert refusal_code(body(reserve(big), charge())) == "compensation_not_allowed"


def test_given_a_reserve_when_its_undo_is_a_delete_then_it_is_refused() -> None:
    compensation = {"operation": "records.delete"}
    assert refusal_code(body(reserve(compensation), charge())) == "compensation_not_allowed"


def test_given_an_undo_when_it_carries_the_agents_payload_then_it_is_refused() -> None:
    compensation = {"operation": "inventory.release", "payload": {"sku": "sku-other", "qty": 99}}
    assert refusal_code(body(reserve(compensation), charge())) == "compensation_payload_not_allowed"


def test_given_undos_that_need_approval_when_a_step_declares_one_then_it_is_refused() -> None:
    # A refund is irreversible: a tenant asking for approval of those cannot have one sent
    # by the saga with nobody to approve it.
    required = frozenset({"destructive", "irreversible"})
    submission = body(reserve({"operation": "inventory.release"}), charge())
    assert refusal_code(submission, required) == "approval_required_in_compensation"


def test_given_the_declared_undos_without_payloads_then_the_submission_passes() -> None:
    check(body(reserve({"operation": "inventory.release"}), charge()), SANDBOX)


@pytest.mark.parametrize("amount", ["4999999", 4999999.5, True, -1, 0, None, [1]])
def test_given_an_amount_that_is_not_a_positive_integer_then_it_is_refused_naming_it(
    amount: Any,
) -> None:
    submission = body(charge(amount))
    with pytest.raises(SubmissionRefused) as refused:
        check(submission, SANDBOX)
    assert refused.value.code == "invalid_payload"
    assert "payload.amount" in refused.value.message


def test_a_charge_needs_an_amount_and_a_reserve_a_sku() -> None:
    charge, reserve = (
        SANDBOX.operations("sandbox")[name] for name in ("payments.charge", "inventory.reserve")
    )
    assert payload_problem(charge, {"currency": "usd"}) == "payload.amount: required"
    assert payload_problem(reserve, {"qty": 1}) == "payload.sku: required"
    assert (payload_problem(reserve, {"sku": "sku-1", "qty": "1"}) or "").startswith("payload.qty:")
    # JSON Schema takes 1.0 for an integer; a quota could not count it, so it is refused.
    assert (payload_problem(charge, {"amount": 1.0}) or "").startswith("payload.amount:")
    # A charge takes fields recon does not read; a reserve names every field it takes.
    assert payload_problem(charge, {"amount": 1, "note": "kept"}) is None
    assert (payload_problem(reserve, {"sku": "s", "note": "x"}) or "").startswith(
        "payload.note: not a field of inventory.reserve"
    )
    assert all(info.payload_schema is not None for _, info in SANDBOX)


@given(st.one_of(st.text(), st.floats(), st.booleans(), st.integers(max_value=-1)))
def test_an_amount_a_quota_cannot_read_is_none_never_zero(amount: Any) -> None:
    assert amount_of({"amount": amount}) is None


@given(st.integers(min_value=0, max_value=2**53))
def test_an_integer_amount_counts_as_itself(amount: int) -> None:
    assert amount_of({"amount": amount}) == amount
    assert amount_of({}) == 0
    # The field the operation declares (OperationInfo.amount_field); none: no money moves.
    assert amount_of({"amount_cents": amount}, "amount_cents") == amount
    assert amount_of({"amount": "5"}, None) == 0


def test_only_an_amount_quota_needs_an_amount() -> None:
    assert counts_amount([Quota(operation="payments.charge", window_s=60, max_amount=1)])
    assert not counts_amount([Quota(operation="payments.charge", window_s=60, max_count=1)])


def test_given_a_reserve_grant_when_a_charge_is_named_as_its_undo_then_it_is_not_granted() -> None:
    policy = PolicyDocument(
        version=1, agents={"agent-1": AgentPolicy(grants=("inventory.reserve",))}
    )
    refusal = submission_refusal(
        policy,
        SANDBOX,
        "agent-1",
        [
            Named("sandbox", "inventory.reserve"),
            Named("sandbox", "payments.charge", compensation_of="inventory.reserve"),
        ],
    )
    assert refusal is not None and refusal.operation == "payments.charge"
    allowed = [
        Named("sandbox", "inventory.reserve"),
        Named("sandbox", "inventory.release", compensation_of="inventory.reserve"),
    ]
    assert submission_refusal(policy, SANDBOX, "agent-1", allowed) is None


def test_given_an_undo_payload_recorded_before_the_fix_then_the_decider_sends_the_derived_one() -> (
    None
):
    # An intent accepted before the intake refused undo payloads: its refund names another
    # charge and a larger amount.
    accepted = submit(["reserve", "charge"])
    chosen = Compensation(
        operation="payments.refund", payload={"amount": 5_000_000, "charge": "ch_other"}
    )
    first = accepted.operations[0].model_copy(update={"compensation": chosen})
    accepted = accepted.model_copy(update={"operations": (first, *accepted.operations[1:])})
    state = initial_state("demo", "tx-1")
    dispatched: list[OperationDispatched] = []
    for message in (
        accepted,
        observed("reserve", 1, Outcome.SUCCEEDED),
        observed("charge", 1, Outcome.REJECTED),
        plan("reserve"),
        compensate("reserve"),
    ):
        state, envelopes = handle(state, message)
        dispatched += [
            e
            for e in (envelope.event() for envelope in envelopes)
            if isinstance(e, OperationDispatched) and e.leg is Leg.COMPENSATION
        ]
    assert [d.payload for d in dispatched] == [
        {"amount": 100, "reverses": {"op_key": first.op_key, "remote_id": "ch_reserve"}}
    ]
