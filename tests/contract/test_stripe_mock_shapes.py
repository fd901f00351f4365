"""The Stripe adapter's requests and Stripe's answers, checked against stripe-mock
(Stripe's own mock, which validates every request against Stripe's OpenAPI document and
answers in its shapes): every request the adapter makes is one Stripe accepts, and every
answer is read as the adapter expects. stripe-mock is stateless and ignores keys, so what
it answers says nothing of idempotency; the contract kit's stateful fake checks that.
"""

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support.stripe_mock_process import stripe_mock  # noqa: F401

from events.inputs import Outcome
from reconcilers.drift import effect_from_json
from services.providers.http import ProviderHttp
from services.providers.interface import Sent
from services.providers.preconditions import BALANCE_FIELDS, balance_evidence
from services.providers.stripe.adapter import KEY_RETENTION_S, StripeAdapter
from services.providers.stripe.operations import CREATED_BY

PAST_RETENTION = timedelta(seconds=KEY_RETENTION_S + 3600)


@pytest.fixture
async def adapter(stripe_mock: str) -> AsyncIterator[StripeAdapter]:  # noqa: F811
    async with ProviderHttp(5.0) as http:
        yield StripeAdapter(http, stripe_mock, "sk_test_123")


def key() -> str:
    return f"shape-{uuid.uuid4()}"


CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("payment_intents.create", {"amount": 1250, "currency": "eur"}, "payment_intent"),
    (
        "payment_intents.create",
        {"amount": 1250, "currency": "eur", "payment_method_types": ["card"], "confirm": False},
        "payment_intent",
    ),
    (
        "payment_intents.confirm",
        {"payment_intent": "pi_123", "payment_method": "pm_card_visa"},
        "payment_intent",
    ),
    (
        "payment_intents.cancel",
        {"payment_intent": "pi_123", "cancellation_reason": "requested_by_customer"},
        "payment_intent",
    ),
    ("refunds.create", {"payment_intent": "pi_123", "amount": 100}, "refund"),
]


@pytest.mark.parametrize(("operation", "payload", "kind"), CALLS)
async def test_every_request_is_one_stripe_accepts_and_its_answer_is_read(
    adapter: StripeAdapter, operation: str, payload: dict[str, Any], kind: str
) -> None:
    seen = await adapter.apply(operation, key(), payload)
    # 200, not stripe-mock's 400 for a parameter Stripe does not have (metadata on a
    # confirm, a nested key encoded wrongly).
    assert seen.status_code == 200, seen.body
    assert seen.body["object"] == kind and seen.remote_id == seen.body["id"]
    # stripe-mock's fixtures are not in the state a real call leaves: only a create and a
    # refund (fixture `succeeded`) read as done; never a refusal or an alarm.
    assert seen.outcome in (Outcome.SUCCEEDED, Outcome.UNKNOWN) and seen.alarm is None


async def test_a_payload_stripe_refuses_is_rejected(adapter: StripeAdapter) -> None:
    seen = await adapter.apply("payment_intents.create", key(), {"amount": "twelve"})
    assert (seen.status_code, seen.outcome) == (400, Outcome.REJECTED)
    assert seen.body["error"]["type"] == "invalid_request_error"


async def test_a_missing_api_key_is_an_alarm_not_a_refusal(stripe_mock: str) -> None:  # noqa: F811
    async with ProviderHttp(5.0) as http:
        adapter = StripeAdapter(http, stripe_mock, "")
        adapter.headers.pop("Authorization")
        seen = await adapter.apply(
            "payment_intents.create", key(), {"amount": 1, "currency": "eur"}
        )
    assert (seen.status_code, seen.outcome) == (401, Outcome.UNKNOWN)
    assert seen.alarm


async def test_a_replay_lookup_inside_the_retention_is_the_identical_request(
    adapter: StripeAdapter,
) -> None:
    payload = {"amount": 1250, "currency": "eur"}
    seen = await adapter.lookup("payment_intents.create", key(), Sent(payload, datetime.now(UTC)))
    assert (seen.status_code, seen.outcome) == (200, Outcome.SUCCEEDED)


@pytest.mark.parametrize(
    ("operation", "payload"),
    [
        ("payment_intents.create", {"amount": 1250, "currency": "eur"}),
        ("payment_intents.confirm", {"payment_intent": "pi_123"}),
        ("refunds.create", {"payment_intent": "pi_123", "amount": 100}),
    ],
)
async def test_past_the_retention_the_lookup_queries_stripe_in_its_shapes(
    adapter: StripeAdapter, operation: str, payload: dict[str, Any]
) -> None:
    at = datetime.now(UTC) - PAST_RETENTION
    seen = await adapter.lookup(operation, key(), Sent(payload, at))
    # The search, the refund list and the intent are read (200); none of stripe-mock's
    # fixtures carries this key, and the intent's fixture is not confirmed: absent.
    assert (seen.status_code, seen.outcome) == (200, Outcome.ABSENT), seen


async def test_the_balance_is_read_in_the_precondition_fields(adapter: StripeAdapter) -> None:
    status, body = await adapter.balance("pi_123")
    assert status == 200
    assert balance_evidence(body) == body and set(body) == set(BALANCE_FIELDS)


async def test_the_drift_listing_reads_stripes_lists(adapter: StripeAdapter) -> None:
    effects = [effect_from_json(raw) for raw in (await adapter.list_effects()).effects]
    assert effects, "stripe-mock lists one intent and one refund"
    assert {e.operation for e in effects} <= set(CREATED_BY.values())


async def test_stripe_accepts_the_listing_of_a_hole_below_a_cut(adapter: StripeAdapter) -> None:
    """`created[gte]` and `created[lt]` together (reconcilers.drift_span.Hole): a filter
    Stripe refused would make every hole's listing unavailable."""
    now = datetime.now(UTC)
    listing = await adapter.list_effects(since=now - timedelta(days=1), until=now)
    assert listing.covered_from is None
    for raw in listing.effects:
        effect_from_json(raw)


async def test_a_listing_capped_at_its_last_page_is_whole(stripe_mock: str) -> None:  # noqa: F811
    """RECON_DRIFT_LIST_PAGES=stripe=1: a cap reached on the last page (`has_more` false)
    is a whole listing, not a cut. What stripe-mock can show of the cap: its lists are one
    page and never say more follow, so a cut is shown by tests/unit/test_drift_list_pages."""
    async with ProviderHttp(5.0) as http:
        capped = StripeAdapter(http, stripe_mock, "sk_test_123", max_list_pages=1)
        listing = await capped.list_effects()
    assert listing.covered_from is None and listing.effects
