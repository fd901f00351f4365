"""The rule of intent identity (events.intent_identity): given the holder of a natural key,
when another submission names it, then the verdict."""

from hypothesis import given
from hypothesis import strategies as st

from events.intent_identity import Holder, Verdict, judge, step_fingerprint

HORIZON_S = 30.0
CHARGE = step_fingerprint("sandbox", "payments.charge", {"amount": 1299, "customer": "cus_1"})
OTHER = step_fingerprint("sandbox", "payments.charge", {"amount": 4200, "customer": "cus_1"})


def holder(**changes: object) -> Holder:
    fields: dict[str, object] = {
        "tx_id": "order-42",
        "action": "charge",
        "step_fingerprint": CHARGE,
        "expired": False,
        "landed": True,
        "attempt_age_s": 1.0,
    }
    return Holder(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_free_key_is_taken() -> None:
    assert judge(None, "order-42-retry", CHARGE, HORIZON_S) is Verdict.TAKE


def test_a_replanned_submission_of_the_same_call_is_a_duplicate() -> None:
    assert judge(holder(), "order-42-retry", CHARGE, HORIZON_S) is Verdict.DUPLICATE


def test_another_payload_under_the_same_key_goes_to_a_person() -> None:
    assert judge(holder(), "order-42-retry", OTHER, HORIZON_S) is Verdict.DIFFERS


def test_the_holder_itself_retrying_owns_its_key() -> None:
    assert judge(holder(landed=False), "order-42", CHARGE, HORIZON_S) is Verdict.OWN


def test_an_expired_claim_frees_the_key() -> None:
    assert judge(holder(expired=True), "order-43", CHARGE, HORIZON_S) is Verdict.TAKE


def test_a_holder_kafka_has_not_acknowledged_makes_others_wait_until_the_horizon() -> None:
    young = holder(landed=False, attempt_age_s=HORIZON_S - 1)
    assert judge(young, "order-42-retry", CHARGE, HORIZON_S) is Verdict.PENDING
    old = holder(landed=False, attempt_age_s=HORIZON_S + 1)
    assert judge(old, "order-42-retry", CHARGE, HORIZON_S) is Verdict.TAKE


def test_the_step_fingerprint_ignores_key_order() -> None:
    reordered = step_fingerprint(
        "sandbox", "payments.charge", {"customer": "cus_1", "amount": 1299}
    )
    assert reordered == CHARGE


@given(
    expired=st.booleans(),
    landed=st.booleans(),
    age=st.floats(min_value=0, max_value=1e6),
    same_call=st.booleans(),
)
def test_a_landed_unexpired_holder_is_never_taken_by_another_tx_id(
    expired: bool, landed: bool, age: float, same_call: bool
) -> None:
    found = holder(expired=expired, landed=landed, attempt_age_s=age)
    verdict = judge(found, "order-42-retry", CHARGE if same_call else OTHER, HORIZON_S)
    if landed and not expired:
        assert verdict in (Verdict.DUPLICATE, Verdict.DIFFERS)
