"""The Stripe operations recon can make, and what Stripe's objects say about them.

Pure: no I/O.

Every object recon makes carries `metadata[op_key]`, so a lookup or the drift scan finds
it by recon's key; confirm and cancel act on an intent made before (Stripe refuses
metadata on them: it is the intent's, set when it was created) and are found through it.
"""

from dataclasses import dataclass

from events.catalog import OperationInfo, Reversibility, SideEffect


@dataclass(frozen=True)
class StripeOperation:
    # The path; `{id}` is the payload field `target`, one escaped segment.
    path: str
    # The Stripe object the answer is (`object` field of the body).
    kind: str
    target: str | None = None
    # Whether the request carries `metadata[op_key]` (the create calls do).
    carries_metadata: bool = True
    # The object statuses that mean the operation took effect; None: any (a create).
    done: frozenset[str] | None = None
    # Statuses that mean it may still take effect: unknown, a webhook or lookup settles it.
    pending: frozenset[str] = frozenset()
    # Statuses that mean it definitively did not.
    refused: frozenset[str] = frozenset()


PAYMENT_INTENT = "payment_intent"
REFUND = "refund"

OPERATIONS: dict[str, StripeOperation] = {
    "payment_intents.create": StripeOperation("/v1/payment_intents", PAYMENT_INTENT),
    "payment_intents.confirm": StripeOperation(
        "/v1/payment_intents/{id}/confirm",
        PAYMENT_INTENT,
        target="payment_intent",
        carries_metadata=False,
        # requires_capture: authorised, the money held; capture is another operation.
        done=frozenset({"succeeded", "requires_capture"}),
        pending=frozenset({"processing", "requires_action"}),
    ),
    "payment_intents.cancel": StripeOperation(
        "/v1/payment_intents/{id}/cancel",
        PAYMENT_INTENT,
        target="payment_intent",
        carries_metadata=False,
        done=frozenset({"canceled"}),
    ),
    "refunds.create": StripeOperation(
        "/v1/refunds",
        REFUND,
        done=frozenset({"succeeded"}),
        pending=frozenset({"pending", "requires_action"}),
        refused=frozenset({"failed", "canceled"}),
    ),
}

# The operation a listed object stands for in the drift scan.
CREATED_BY = {PAYMENT_INTENT: "payment_intents.create", REFUND: "refunds.create"}

# What recon's rules read of each (events.catalog): an intent made but not confirmed holds
# nothing and is cancelled as its undo; a confirmed payment is undone by a refund, which
# leaves a trace; a cancel and a refund stay done.
_AMOUNT = {"type": "integer", "minimum": 1}
DECLARED: dict[str, OperationInfo] = {
    info.name: info
    for info in (
        OperationInfo(
            "payment_intents.create",
            SideEffect.WRITE,
            Reversibility.REVERSIBLE,
            compensation="payment_intents.cancel",
            # The intent made is cancelled by its id, which the create's answer carries.
            undo_payload={"payment_intent": "$remote_id"},
            payload_schema={
                "type": "object",
                "required": ["amount", "currency"],
                "properties": {"amount": _AMOUNT, "currency": {"type": "string"}},
            },
            amount_field="amount",
        ),
        OperationInfo(
            "payment_intents.confirm",
            SideEffect.WRITE,
            Reversibility.COMPENSATING_ONLY,
            compensation="refunds.create",
            # The confirmed intent is refunded in full, by its id (the confirm's answer is
            # the intent, so its id is the evidence's remote id).
            undo_payload={"payment_intent": "$remote_id"},
            payload_schema={
                "type": "object",
                "required": ["payment_intent"],
                "properties": {"payment_intent": {"type": "string"}},
            },
        ),
        OperationInfo(
            "payment_intents.cancel",
            SideEffect.WRITE,
            Reversibility.IRREVERSIBLE,
            payload_schema={
                "type": "object",
                "required": ["payment_intent"],
                "properties": {"payment_intent": {"type": "string"}},
            },
        ),
        OperationInfo(
            "refunds.create",
            SideEffect.WRITE,
            Reversibility.IRREVERSIBLE,
            payload_schema={
                "type": "object",
                "required": ["payment_intent"],
                "properties": {"payment_intent": {"type": "string"}, "amount": _AMOUNT},
            },
            amount_field="amount",
        ),
    )
}
