"""The Stripe adapter reads Stripe's events (services.providers.stripe.webhooks): each
event is tied to the recon operation whose request caused it, or to the one that created
its object, and says what happened to it; what recon does not act on settles nothing."""

import json

import pytest
from support.stripe_events import body, charge_refunded, event, payment_intent, refund

from events.inputs import Outcome
from reconcilers.webhook_reading import EffectNotice, WebhookBodyError, WebhookReading
from services.providers.stripe.webhooks import read_event

CREATE = "rk1_" + "c" * 40
CONFIRM = "rk1_" + "f" * 40
CANCEL = "rk1_" + "x" * 40
REFUND = "rk1_" + "r" * 40


def notice_of(raw: bytes) -> EffectNotice:
    reading = read_event(raw)
    assert reading.notice is not None, reading
    return reading.notice


@pytest.mark.parametrize(
    ("kind", "status", "outcome"),
    [
        ("payment_intent.succeeded", "succeeded", Outcome.SUCCEEDED),
        # Authorised, the money held: what a confirm of a manual-capture intent leaves.
        ("payment_intent.amount_capturable_updated", "requires_capture", Outcome.SUCCEEDED),
        ("payment_intent.processing", "processing", Outcome.UNKNOWN),
        ("payment_intent.payment_failed", "requires_payment_method", Outcome.REJECTED),
    ],
)
def test_an_intent_event_a_confirm_caused_is_that_confirms_outcome(
    kind: str, status: str, outcome: Outcome
) -> None:
    notice = notice_of(body(kind, payment_intent(status, CREATE), CONFIRM))

    assert notice.keys == (CONFIRM,)
    assert notice.outcome is outcome
    assert notice.effect_id == "pi_3PgafyB7WZ01zgkW1SjxsAJo"
    assert notice.effect["status"] == status  # the intent is the evidence
    # The intent's metadata names its create: another key, legitimately, not a mismatch.
    assert notice.claimed_op_key is None


def test_a_canceled_event_a_cancel_caused_is_the_cancel_done() -> None:
    notice = notice_of(body("payment_intent.canceled", payment_intent("canceled", CREATE), CANCEL))

    assert (notice.keys, notice.outcome) == ((CANCEL,), Outcome.SUCCEEDED)


@pytest.mark.parametrize("request_key", [CREATE, None])
def test_an_intent_event_of_its_own_create_or_of_no_request_proves_the_create(
    request_key: str | None,
) -> None:
    # Created and confirmed in one request, or a payment Stripe settled later on its own
    # (request.idempotency_key null): the metadata names the intent's create.
    for kind, status in [
        ("payment_intent.succeeded", "succeeded"),
        ("payment_intent.payment_failed", "requires_payment_method"),
    ]:
        notice = notice_of(body(kind, payment_intent(status, CREATE), request_key))
        assert (notice.keys, notice.outcome) == ((CREATE,), Outcome.SUCCEEDED)


def test_an_intent_recon_did_not_make_is_read_without_a_key() -> None:
    notice = notice_of(body("payment_intent.succeeded", payment_intent("succeeded", None), None))

    assert notice.keys == ()  # an effect no intent explains: drift, judged by meaning()


@pytest.mark.parametrize(
    ("kind", "status", "outcome"),
    [
        ("refund.created", "succeeded", Outcome.SUCCEEDED),
        ("refund.created", "pending", Outcome.UNKNOWN),
        ("refund.updated", "succeeded", Outcome.SUCCEEDED),
        ("refund.failed", "failed", Outcome.REJECTED),
        ("charge.refund.updated", "canceled", Outcome.REJECTED),
    ],
)
def test_a_refund_event_says_what_became_of_the_refund(
    kind: str, status: str, outcome: Outcome
) -> None:
    notice = notice_of(body(kind, refund(status, REFUND), REFUND))

    assert (notice.keys, notice.outcome) == ((REFUND,), outcome)
    assert notice.effect_id == "re_3PgafyB7WZ01zgkW1qPvrRrP"
    assert notice.claimed_op_key == REFUND


def test_a_refund_settled_later_is_found_by_the_key_it_was_made_under() -> None:
    # Stripe raised it on its own (a pending refund that succeeded), or another request
    # (someone updating its metadata) did: the refund's own key follows.
    alone = notice_of(body("refund.updated", refund("succeeded", REFUND), None))
    assert (alone.keys, alone.outcome) == ((REFUND,), Outcome.SUCCEEDED)
    other = notice_of(body("refund.updated", refund("succeeded", REFUND), "their-key"))
    assert other.keys == ("their-key", REFUND)


def test_charge_refunded_is_read_through_the_refund_it_lists_under_the_key() -> None:
    listed = [refund("succeeded", "rk1_someone_else", "re_other"), refund("succeeded", REFUND)]

    notice = notice_of(body("charge.refunded", charge_refunded(listed), REFUND))

    assert (notice.effect_id, notice.keys) == ("re_3PgafyB7WZ01zgkW1qPvrRrP", (REFUND,))
    # Not listed (Stripe's default since 2022-11-15), or not by recon: the refund.* events do.
    for charge, key in [(charge_refunded(None), REFUND), (charge_refunded(listed), None)]:
        assert read_event(body("charge.refunded", charge, key)) == WebhookReading("charge.refunded")


def test_an_event_recon_does_not_act_on_is_its_type_alone() -> None:
    customer = {"id": "cus_QXg1hqf4jFNsqG", "object": "customer", "metadata": {}}

    assert read_event(body("customer.created", customer, None)) == WebhookReading(
        "customer.created"
    )


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"{", "not JSON"),
        (b'{"id": "evt_1"}', '"type"'),
        (body("payment_intent.succeeded", {"object": "payment_intent"}, None), '"id"'),
        (
            body("payment_intent.succeeded", refund("succeeded", REFUND), None),
            "must carry a payment_intent",
        ),
        (body("refund.updated", payment_intent("succeeded", CREATE), None), "must carry a refund"),
    ],
)
def test_a_body_that_is_not_a_stripe_event_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(WebhookBodyError, match=why):
        read_event(raw)


def test_an_event_of_an_older_api_version_whose_request_is_an_id_is_read_without_it() -> None:
    old = event("payment_intent.succeeded", payment_intent("succeeded", CREATE), None)
    old["request"] = "req_Dm43xiq1k0ywrR"  # API versions before 2017-05-25

    reading = read_event(json.dumps(old).encode())

    assert reading.notice is not None and reading.notice.keys == (CREATE,)


def test_a_created_event_is_the_create_under_its_request_key() -> None:
    made = notice_of(
        body("payment_intent.created", payment_intent("requires_payment_method", CREATE), CREATE)
    )
    assert (made.keys, made.outcome, made.claimed_op_key) == ((CREATE,), Outcome.SUCCEEDED, CREATE)
    # Metadata naming another key than the request's: compared, a mismatch for meaning().
    odd = notice_of(
        body("payment_intent.created", payment_intent("requires_payment_method", REFUND), CREATE)
    )
    assert (odd.keys, odd.claimed_op_key) == ((CREATE, REFUND), REFUND)
