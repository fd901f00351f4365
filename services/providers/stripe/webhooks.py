"""What Stripe's events say about recon's operations (https://docs.stripe.com/api/events,
/webhooks): the Stripe adapter's webhook reader.

Pure: no I/O. Only bodies whose `Stripe-Signature` was already verified reach it.

An event (`{"id": "evt_...", "type": ..., "data": {"object": {...}}, "request": {"id",
"idempotency_key"}}`) carries the object it is about and, when an API request caused it,
that request's `Idempotency-Key`: recon's op key of the call that caused it. An event Stripe
raised on its own (a payment that succeeded after `processing`, a refund that settled
later) has `request.idempotency_key: null`; the object's `metadata[op_key]` then names
the operation that created it. In Stripe that metadata is written only by holders of the
account's secret key (recon, or its operator), and recon sets it on every object it
creates over whatever a payload says (adapter._request), so it is offered as a key here,
unlike in recon's own format (reconcilers.webhook_reading) where anyone at a shared
provider can write it; reconcilers.webhook_intake.meaning still holds it to the account
that signed the delivery.

- `payment_intent.created`: the create under the request's key (its metadata must agree).
- `payment_intent.*`: caused by a request under another key than the intent's own (a
  confirm, a cancel), the event is that request's outcome: `succeeded` and
  `amount_capturable_updated` done, `payment_failed` refused, `canceled` a cancel done,
  `processing` not settled (operations.py's states decide, one judge). Caused by the
  intent's own create, or by no request, it proves the intent exists: its create took
  effect.
- `refund.*` (and the older `charge.refund.updated`): the refund made under the key; its
  status decides (`succeeded`, `failed`/`canceled`, `pending`).
- `charge.refunded`: read through the refund it lists under the request's key, when the
  charge lists its refunds (since API version 2022-11-15 it does only when expanded);
  otherwise it settles nothing and the `refund.*` events do.
- Any other type is recorded as delivered and settles nothing.
"""

from typing import Any

from events.inputs import Outcome
from reconcilers.webhook_reading import (
    EffectNotice,
    WebhookBodyError,
    WebhookReading,
    load_body,
    metadata_op_key,
)
from services.providers.stripe.classify import judge_object
from services.providers.stripe.operations import (
    OPERATIONS,
    PAYMENT_INTENT,
    REFUND,
    StripeOperation,
)

# The intent's state after these tells what the request that caused them did.
INTENT_EVENTS = frozenset(
    {
        "payment_intent.created",
        "payment_intent.succeeded",
        "payment_intent.amount_capturable_updated",
        "payment_intent.payment_failed",
        "payment_intent.canceled",
        "payment_intent.processing",
    }
)
REFUND_EVENTS = frozenset(
    {"refund.created", "refund.updated", "refund.failed", "charge.refund.updated"}
)
CHARGE_REFUNDED = "charge.refunded"
CREATED = "payment_intent.created"
PAYMENT_FAILED = "payment_intent.payment_failed"
CANCELED = "payment_intent.canceled"


def read_event(body: bytes) -> WebhookReading:
    event = load_body(body)
    kind: str = event["type"]
    if kind not in INTENT_EVENTS | REFUND_EVENTS | {CHARGE_REFUNDED}:
        return WebhookReading(kind)
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str) or not obj["id"]:
        raise WebhookBodyError(f'a {kind} event must carry its object, with an "id", in data')
    request_key = _request_key(event)
    if kind in INTENT_EVENTS:
        intent = _of_kind(obj, PAYMENT_INTENT, kind)
        return WebhookReading(kind, _intent_notice(kind, intent, request_key))
    if kind in REFUND_EVENTS:
        return WebhookReading(kind, _refund_notice(_of_kind(obj, REFUND, kind), request_key))
    refund = _listed_refund(obj, request_key)
    return WebhookReading(kind, None if refund is None else _refund_notice(refund, request_key))


def _request_key(event: dict[str, Any]) -> str | None:
    """The `Idempotency-Key` of the API request that caused the event (None: no request,
    or an API version whose `request` is a bare id)."""
    request = event.get("request")
    key = request.get("idempotency_key") if isinstance(request, dict) else None
    return key if isinstance(key, str) and key else None


def _of_kind(obj: dict[str, Any], kind: str, event: str) -> dict[str, Any]:
    if obj.get("object") != kind:
        raise WebhookBodyError(f"a {event} event must carry a {kind}, not {obj.get('object')!r}")
    return obj


def _intent_notice(kind: str, intent: dict[str, Any], request_key: str | None) -> EffectNotice:
    own_key = metadata_op_key(intent)
    if kind == CREATED:
        # Made by the request: its key, and the metadata recon set with it, must agree.
        keys = tuple(dict.fromkeys(k for k in (request_key, own_key) if k is not None))
        created = judge_object(OPERATIONS["payment_intents.create"], 200, intent).outcome
        return EffectNotice(intent, intent["id"], keys, created, claimed_op_key=own_key)
    if request_key is not None and request_key != own_key:
        # A request on an intent made before (a confirm, a cancel): the event is its outcome.
        acted: StripeOperation = OPERATIONS[
            "payment_intents.cancel" if kind == CANCELED else "payment_intents.confirm"
        ]
        outcome = judge_object(acted, 200, intent).outcome
        if kind == PAYMENT_FAILED:
            # The attempt was declined (the intent is back to requires_payment_method).
            outcome = Outcome.REJECTED
        return EffectNotice(intent, intent["id"], (request_key,), outcome)
    # Its own create, or no request: the event proves the intent recon created exists.
    created = judge_object(OPERATIONS["payment_intents.create"], 200, intent).outcome
    return EffectNotice(intent, intent["id"], (own_key,) if own_key else (), created)


def _refund_notice(refund: dict[str, Any], request_key: str | None) -> EffectNotice:
    """A refund is made by its create alone, under the key its metadata names: the
    request's key first (another request may have updated it), then the metadata's."""
    own_key = metadata_op_key(refund)
    keys = tuple(dict.fromkeys(k for k in (request_key, own_key) if k is not None))
    outcome = judge_object(OPERATIONS["refunds.create"], 200, refund).outcome
    return EffectNotice(refund, refund["id"], keys, outcome, claimed_op_key=own_key)


def _listed_refund(charge: dict[str, Any], request_key: str | None) -> dict[str, Any] | None:
    """The refund a charge lists under the request's key (recon's refunds carry it as
    their metadata), if the charge lists its refunds at all."""
    refunds = charge.get("refunds")
    listed = refunds.get("data") if isinstance(refunds, dict) else None
    if request_key is None or not isinstance(listed, list):
        return None
    for refund in listed:
        if (
            isinstance(refund, dict)
            and refund.get("object") == REFUND
            and isinstance(refund.get("id"), str)
            and metadata_op_key(refund) == request_key
        ):
            return refund
    return None
