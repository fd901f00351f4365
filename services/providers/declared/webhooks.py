"""A declared provider's webhook events, read by its file's `[webhooks.events]`: the
effect at a pointer, its id and the idempotency key it was made under, and what its event
type says; without that table the provider sends recon's own format. Pure: no I/O."""

from events.inputs import Outcome
from reconcilers.webhook_reading import (
    EffectNotice,
    WebhookBodyError,
    WebhookReading,
    load_body,
    read_effect_webhook,
)
from services.providers.declared import fields
from services.providers.declared.model import Webhooks

SAYS = {"succeeded": Outcome.SUCCEEDED, "rejected": Outcome.REJECTED, "unknown": Outcome.UNKNOWN}


def read(declared: Webhooks, body: bytes) -> WebhookReading:
    events = declared.events
    if events is None:
        return read_effect_webhook(body)
    event = load_body(body)
    says = events.types.get(event["type"])
    if says is None:
        return WebhookReading(event["type"])
    effect = fields.get(event, events.effect)
    if not isinstance(effect, dict):
        raise WebhookBodyError(f"the event carries no effect object at {events.effect}")
    effect_id = fields.get(effect, events.id)
    if not isinstance(effect_id, str | int) or isinstance(effect_id, bool) or effect_id == "":
        raise WebhookBodyError(f"the effect has no id at {events.id}")
    key = fields.get(effect, events.key)
    claimed = None if events.reference is None else fields.get(effect, events.reference)
    return WebhookReading(
        event["type"],
        EffectNotice(
            effect=effect,
            effect_id=str(effect_id),
            # Only the idempotency key the provider tied the effect to is matched on.
            keys=(key,) if isinstance(key, str) and key else (),
            outcome=SAYS[says],
            claimed_op_key=claimed if isinstance(claimed, str) and claimed else None,
        ),
    )
