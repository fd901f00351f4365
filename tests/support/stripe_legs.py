"""A Stripe confirm recon made whose answer was lost, for the tests that settle it (by a
lookup, tests/integration/test_stripe_reconciler.py; by a webhook, test_stripe_webhooks.py).
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from events.definition import OperationKind, OperationSpec
from events.envelope import Envelope
from events.inputs import Outcome, Source, SubmitTransaction
from events.keys import op_key
from events.observation import Seen, observation
from services.providers.interface import ProviderAdapter
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state


@dataclass(frozen=True)
class LostConfirm:
    state: TransactionState  # the decider's, the step `unknown`
    log: list[Envelope]  # its events so far, to project
    key: str  # the confirm's op key
    payload: dict[str, Any]
    intent: dict[str, Any]  # the intent as Stripe answered the confirm


async def lost_confirm(
    adapter: ProviderAdapter, tenant: str, tx_id: str, at: datetime
) -> LostConfirm:
    """A confirm submitted at `at` whose call reached Stripe (`adapter`) and whose answer
    was lost: the decider holds it `unknown` (the dispatcher said so), Stripe succeeded."""
    made = await adapter.apply(
        "payment_intents.create",
        f"k_{tx_id}_create",
        {"amount": 1250, "currency": "eur", "payment_method": "pm_card_visa"},
    )
    assert made.outcome is Outcome.SUCCEEDED and made.remote_id is not None
    key = op_key(tenant=tenant, environment="test", provider="pay", tx_id=tx_id, action="pay")
    payload = {"payment_intent": made.remote_id}
    submit = SubmitTransaction(
        message_id=f"cmd-{tx_id}",
        tenant=tenant,
        tx_id=tx_id,
        agent_id="agent-1",
        fingerprint="f" * 64,
        operations=(
            OperationSpec(
                action="pay",
                kind=OperationKind.STEP,
                provider="pay",
                operation="payment_intents.confirm",
                payload=payload,
                op_key=key,
            ),
        ),
        issued_at=at,
    )
    state, log = handle(initial_state(tenant, tx_id), submit)
    confirmed = await adapter.apply("payment_intents.confirm", key, payload)
    assert confirmed.outcome is Outcome.SUCCEEDED and isinstance(confirmed.body, dict)
    lost = observation(
        message_id=f"obs-{tx_id}",
        tenant=tenant,
        tx_id=tx_id,
        action="pay",
        op_key=key,
        attempt=1,
        source=Source.RESPONSE,
        seen=Seen(Outcome.UNKNOWN, error="read timeout"),
        observed_at=at + timedelta(seconds=1),
    )
    state, unknown = handle(state, lost)
    return LostConfirm(state, log + unknown, key, payload, confirmed.body)
