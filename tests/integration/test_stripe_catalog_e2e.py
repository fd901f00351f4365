"""A Stripe transaction through the catalog, end to end (issue 20, item 2): the intake takes
Stripe's operations because the `pay` provider's adapter declares them, the decider runs
them by the facts recorded at acceptance, and a failed later step undoes the payment intent
with the undo payload Stripe's adapter declares (`{"payment_intent": "$remote_id"}`): the
cancel names the intent made. With the step's payload and `reverses` instead (the sandbox's
shape), the cancel has no intent to name and the transaction ends in review.

Real Kafka, Postgres and every recon process; the stateful Stripe fake runs in the test's
loop. The sandbox stays configured at an address nothing answers on.
"""

from typing import Any

from support.recon_client import op
from support.stack_fixtures import StackWith
from support.stripe_fake import API_KEY, StripeFake, running_fake


def intent_then_refused_refund(tx_id: str) -> dict[str, Any]:
    return {
        "tx_id": tx_id,
        "agent_id": "agent-7",
        "steps": [
            {
                "action": "intent",
                "provider": "pay",
                "operation": "payment_intents.create",
                "payload": {"amount": 1250, "currency": "eur"},
                "compensation": {"operation": "payment_intents.cancel"},
            },
            {
                # Stripe refuses a refund of an intent it never charged (400
                # invalid_request_error): a definitive refusal, so the intent is undone.
                "action": "refund",
                "provider": "pay",
                "operation": "refunds.create",
                "payload": {"payment_intent": "pi_never_charged"},
            },
        ],
    }


async def test_a_stripe_intent_is_undone_by_its_declared_cancel(stack_with: StackWith) -> None:
    async with (
        running_fake() as (fake, url),
        stack_with(
            RECON_PROVIDERS=f"sandbox=http://127.0.0.1:9,pay={url}",
            RECON_PROVIDER_ADAPTERS="pay=stripe",
            RECON_PROVIDER_SECRETS=f"pay={API_KEY}",
        ) as (_, recon),
    ):
        listed = await recon.http.get(f"{recon.intake_url}/v1/catalog", headers=recon.headers)
        catalog = listed.json()
        assert any(e["provider"] == "pay" for e in catalog["operations"]), catalog
        accepted = await recon.submit(intent_then_refused_refund("stripe-1"))
        assert accepted.status_code == 202, accepted.text
        tx = await recon.wait_terminal("stripe-1")
        assert tx["status"] == "compensated", tx
        assert op(tx, "refund")["state"] == "failed", tx
        intent = op(tx, "intent")
        assert intent["state"] == "compensated", tx
        made = _intent(fake, intent["remote_id"])
        assert made["status"] == "canceled", made
        assert made["metadata"] == {"op_key": intent["op_key"]}


def _intent(fake: StripeFake, intent_id: str) -> dict[str, Any]:
    found: dict[str, Any] = fake.intents[intent_id]
    return found
