"""What a provider's webhook body says, read before anything is done with it: the one
loader every adapter's reader starts from (`load_body`), what a reader returns
(`WebhookReading`, with an `EffectNotice` when the event is about an effect), and the
reader of recon's own body format (`read_effect_webhook`, the sandbox's and the default's).

Each adapter reads its provider's events (ProviderAdapter.read_webhook: the Stripe
adapter's is services.providers.stripe.webhooks); what a notice then means for recon is
judged in one place, reconcilers.webhook_intake.meaning.

Pure: no I/O. Only bodies whose signature was already verified reach this module.
"""

from dataclasses import dataclass
from typing import Any

from events.inputs import Outcome
from events.safe_json import escaped_of
from reconcilers.signatures import parsed_json

# recon's own event type (docs/contract.md, "Webhooks").
EFFECT_SUCCEEDED = "effect.succeeded"


class WebhookBodyError(ValueError):
    """A signed body no reader can read (a 400 `invalid_webhook`: nothing is recorded, and
    the provider's retries are refused the same way)."""


@dataclass(frozen=True)
class EffectNotice:
    """The part of a webhook recon acts on: one effect at the provider, the keys recon may
    know it under, and what the event says of the operation made under them."""

    # The effect as the provider describes it: the observation's evidence.
    effect: dict[str, Any]
    effect_id: str
    # The keys recon may know the effect under, most trusted first: the idempotency key
    # of the request that made it (the provider ties the effect to it; nobody but recon
    # knows it before the call), or what an adapter documents as as good.
    keys: tuple[str, ...]
    # What the event says of the operation made under the key: `succeeded` (the effect
    # exists), `rejected` (the provider refused it), `unknown` (not settled yet). The
    # decider takes a webhook as proof of an effect only; any other outcome is evidence.
    outcome: Outcome = Outcome.SUCCEEDED
    # The op key the effect's metadata claims: only compared, never matched on.
    claimed_op_key: str | None = None


@dataclass(frozen=True)
class WebhookReading:
    """One verified delivery, read: its event type, and the effect notice when the event
    is one the adapter acts on (None: recorded as delivered, settles nothing)."""

    type: str
    notice: EffectNotice | None = None


def load_body(body: bytes) -> dict[str, Any]:
    """The body as a JSON object with a string `type`, or WebhookBodyError."""
    try:
        # Escaped at once: a lone surrogate or a NUL would make the observation (or the
        # drift report) fail to encode or to store, on every retry of the delivery.
        event = escaped_of(body, parsed_json(body))
    except ValueError:
        raise WebhookBodyError("the body is not JSON") from None
    except RecursionError:
        # A signed body nested thousands deep fits the size cap; it is refused, not a 500.
        raise WebhookBodyError("the body is nested too deeply") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise WebhookBodyError('the body must be a JSON object with a string "type"')
    return event


def read_effect_webhook(body: bytes) -> WebhookReading:
    """recon's own format: `{"type": "effect.succeeded", "data": {"effect": {...}}}`, the
    effect as the sandbox lists it. Matched on the effect's `idempotency_key` alone:
    `metadata.op_key` is whatever the caller who created the effect wrote, and anyone with
    an account at a shared provider can put a victim's op key there (issue 18, item 13)."""
    event = load_body(body)
    if event["type"] != EFFECT_SUCCEEDED:
        return WebhookReading(event["type"])
    data = event.get("data")
    effect = data.get("effect") if isinstance(data, dict) else None
    if not isinstance(effect, dict):
        raise WebhookBodyError('the body must carry the effect as "data": {"effect": {...}}')
    effect_id = effect.get("id")
    if not isinstance(effect_id, str) or not effect_id:
        raise WebhookBodyError('data.effect must have a string "id"')
    idempotency_key = effect.get("idempotency_key")
    keys = (idempotency_key,) if isinstance(idempotency_key, str) and idempotency_key else ()
    return WebhookReading(
        event["type"],
        EffectNotice(
            effect=effect,
            effect_id=effect_id,
            keys=keys,
            claimed_op_key=metadata_op_key(effect),
        ),
    )


def metadata_op_key(effect: dict[str, Any]) -> str | None:
    """The op key an object's `metadata` names, if any."""
    metadata = effect.get("metadata")
    key = metadata.get("op_key") if isinstance(metadata, dict) else None
    return key if isinstance(key, str) and key else None
