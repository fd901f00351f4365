"""The Stripe adapter's pure rules: what an answer means (stripe/classify.py) and how a
request is encoded (stripe/forms.py). The contract kit checks every status family through
the adapter; these pin the Stripe-specific readings."""

import pytest
from support.provider_kit import Scripted

from events.inputs import Outcome
from services.providers.stripe.adapter import StripeAdapter
from services.providers.stripe.classify import classify
from services.providers.stripe.forms import encode


def test_a_form_is_encoded_with_nested_keys_in_one_order_whatever_the_dicts() -> None:
    one = {"metadata": {"op_key": "k&1", "b": "x"}, "amount": 5, "confirm": True, "expand": ["a"]}
    other = {"expand": ["a"], "confirm": True, "amount": 5, "metadata": {"b": "x", "op_key": "k&1"}}
    # Pinned: a replay resends these bytes, and Stripe compares them with the first's.
    expected = "amount=5&confirm=true&expand[0]=a&metadata[b]=x&metadata[op_key]=k%261"
    assert encode(one) == encode(other) == expected


def _error(kind: str) -> dict[str, object]:
    return {"error": {"type": kind, "message": "..."}}


@pytest.mark.parametrize(
    ("operation", "status", "body", "outcome"),
    [
        (
            "payment_intents.confirm",
            200,
            {"object": "payment_intent", "id": "pi", "status": "succeeded"},
            Outcome.SUCCEEDED,
        ),
        (
            "payment_intents.confirm",
            200,
            {"object": "payment_intent", "id": "pi", "status": "processing"},
            Outcome.UNKNOWN,
        ),
        (
            "payment_intents.cancel",
            200,
            {"object": "payment_intent", "id": "pi", "status": "canceled"},
            Outcome.SUCCEEDED,
        ),
        (
            "refunds.create",
            200,
            {"object": "refund", "id": "re", "status": "failed"},
            Outcome.REJECTED,
        ),
        (
            "refunds.create",
            200,
            {"object": "refund", "id": "re", "status": "pending"},
            Outcome.UNKNOWN,
        ),
        # The object asked for, or nothing proven: a charge where a refund was due.
        (
            "refunds.create",
            200,
            {"object": "charge", "id": "ch", "status": "succeeded"},
            Outcome.UNKNOWN,
        ),
        ("refunds.create", 400, _error("invalid_request_error"), Outcome.REJECTED),
        ("refunds.create", 400, _error("idempotency_error"), Outcome.KEY_CONFLICT),
        # 409 under the same key: the first request is running, whatever the error's type.
        ("refunds.create", 409, _error("idempotency_error"), Outcome.UNKNOWN),
        ("payment_intents.confirm", 402, _error("card_error"), Outcome.REJECTED),
        # A 400/402 that is not Stripe's error object is not Stripe's judgement.
        ("payment_intents.confirm", 402, {"text": "<html>"}, Outcome.UNKNOWN),
        ("payment_intents.confirm", 400, {"text": "Bad Request"}, Outcome.UNKNOWN),
    ],
)
def test_what_a_stripe_answer_means(
    operation: str, status: int, body: object, outcome: Outcome
) -> None:
    assert classify(operation, status, body).outcome is outcome


def test_a_400_that_is_not_stripes_answer_raises_an_alarm() -> None:
    assert classify("refunds.create", 400, {"text": "Bad Request"}).alarm


async def test_an_operation_the_stripe_adapter_has_not_is_refused_without_a_call() -> None:
    provider = Scripted()
    adapter = StripeAdapter(provider, "https://stripe.invalid", "sk_test_1")
    seen = await adapter.apply("payments.charge", "k", {"amount": 1})
    assert (seen.outcome, provider.requests) == (Outcome.REJECTED, 0)
    assert seen.alarm
    looked = await adapter.lookup("payments.charge", "k")
    assert (looked.outcome, provider.requests) == (Outcome.UNAVAILABLE, 0)


def test_every_stripe_operation_is_declared_with_compensations_it_has() -> None:
    from services.providers.stripe.operations import DECLARED, OPERATIONS

    assert set(DECLARED) == set(OPERATIONS)
    for info in DECLARED.values():
        assert info.compensation is None or info.compensation in DECLARED, info.name
