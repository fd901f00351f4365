"""The built-in adapters as contract kit targets (tests/support/provider_kit.py): the
sandbox adapter against the sandbox process, the Stripe adapter against the stateful
Stripe fake (tests/support/stripe_fake.py). stripe-mock, stateless, checks the Stripe
adapter's request and response shapes apart (tests/contract/test_stripe_mock_shapes.py).
"""

import asyncio
import base64
import json
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from reconcilers.signatures import sign_standard, sign_stripe
from services.config import DEFAULT_WEBHOOK_SECRET
from services.providers.adapters import SandboxAdapter
from services.providers.http import ProviderHttp, Requester
from services.providers.interface import ProviderAdapter
from services.providers.stripe.adapter import StripeAdapter
from support import stripe_events
from support.provider_kit import Answers, KitTarget, Live, RefusalFacts, Webhooks, recon_format
from support.sandbox_process import start_sandbox, stop
from support.stripe_fake import API_KEY, RETENTION_S, running_fake


def _now() -> datetime:
    return datetime.now(UTC)


class SandboxTarget:
    name = "sandbox"
    secret = DEFAULT_WEBHOOK_SECRET
    other_secret = "whsec_" + base64.b64encode(b"another-sandbox-secret").decode()
    answers = Answers(
        operation="payments.charge",
        confirmed=(200, b'{"id": "ch_1", "status": "succeeded"}'),
        refusal=(402, b'{"error": "card_declined", "message": "declined"}'),
        key_conflict=(409, b'{"error": "idempotency_key_reused", "message": "other body"}'),
        in_flight=(409, b'{"error": "request_in_progress", "message": "still running"}'),
        error=b'{"error": "service_unavailable", "message": "try later"}',
    )

    webhooks = recon_format("payments.charge")

    def sign(self, secret: str, timestamp: int, body: bytes) -> dict[str, str]:
        return sign_standard(secret, f"msg_{uuid.uuid4().hex}", timestamp, body)

    def adapter_over(self, http: Requester) -> ProviderAdapter:
        return SandboxAdapter(http, "http://sandbox.invalid")

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Live]:
        with tempfile.TemporaryDirectory() as tmp:
            sandbox = await asyncio.to_thread(start_sandbox, Path(tmp) / "kit.sqlite3")
            try:
                async with ProviderHttp(10.0) as http:

                    async def payload() -> dict[str, Any]:
                        return {"amount": 1250, "currency": "eur", "customer": "cus_kit"}

                    async def effects_under(key: str) -> int:
                        answer = await http.request(
                            "GET", f"{sandbox.url}/v1/effects", params={"idempotency_key": key}
                        )
                        return len(json.loads(answer.body)["effects"])

                    async def slow_down(seconds: float) -> None:
                        await http.request("DELETE", f"{sandbox.url}/v1/faults")
                        if seconds:
                            fault = {
                                "operation": "payments.charge",
                                "mode": "delay",
                                "delay_ms": int(seconds * 1000),
                                "times": 50,
                            }
                            await http.request("POST", f"{sandbox.url}/v1/faults", json=fault)

                    async def revoked() -> dict[str, Any]:
                        # A charge made on the sandbox's side, its authorization revoked
                        # (the dashboard's, as an operator does): a refund of it is refused
                        # (422 authorization_revoked) until it is reinstated.
                        made = await http.request(
                            "POST",
                            f"{sandbox.url}/v1/payments/charge",
                            json=await payload(),
                            headers={"Idempotency-Key": f"kit-charge-{uuid.uuid4()}"},
                        )
                        assert made.status == 200, made.body
                        charge = json.loads(made.body)["id"]
                        await http.request(
                            "POST", f"{sandbox.url}/v1/dashboard/revoke", json={"charge": charge}
                        )
                        return {"charge": charge, "amount": 100}

                    async def reinstate(refund: dict[str, Any]) -> None:
                        await http.request(
                            "POST",
                            f"{sandbox.url}/v1/dashboard/reinstate",
                            json={"charge": refund["charge"]},
                        )

                    yield Live(
                        adapter=SandboxAdapter(http, sandbox.url),
                        operation=self.answers.operation,
                        now=_now,
                        payload=payload,
                        other=lambda p: {**p, "amount": p["amount"] + 1},
                        effects_under=effects_under,
                        slow_down=slow_down,
                        refusals=(RefusalFacts("payments.refund", revoked, reinstate),),
                    )
            finally:
                await asyncio.to_thread(stop, sandbox.process)


def _stripe_error(kind: str, message: str) -> bytes:
    return json.dumps({"error": {"type": kind, "message": message}}).encode()


class StripeFakeTarget:
    name = "stripe-fake"
    secret = "whsec_kit_stripe_secret"
    other_secret = "whsec_kit_another_secret"
    answers = Answers(
        operation="payment_intents.create",
        confirmed=(
            200,
            b'{"id": "pi_1", "object": "payment_intent", "status": "requires_payment_method"}',
        ),
        refusal=(402, _stripe_error("card_error", "Your card was declined.")),
        key_conflict=(400, _stripe_error("idempotency_error", "other parameters")),
        in_flight=(409, _stripe_error("idempotency_error", "another request in progress")),
        error=_stripe_error("api_error", "something went wrong"),
    )

    webhooks = Webhooks(
        # The intent's own create, as Stripe tells it under the create request's key.
        effect=lambda key: stripe_events.body(
            "payment_intent.created",
            stripe_events.payment_intent("requires_payment_method", key),
            key,
        ),
        unread=stripe_events.body(
            "customer.created", {"id": "cus_kit", "object": "customer"}, None
        ),
        malformed=stripe_events.body("payment_intent.created", {"object": "payment_intent"}, None),
    )

    def sign(self, secret: str, timestamp: int, body: bytes) -> dict[str, str]:
        return sign_stripe(secret, timestamp, body)

    def adapter_over(self, http: Requester) -> ProviderAdapter:
        return StripeAdapter(http, "https://stripe.invalid", API_KEY)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Live]:
        async with running_fake() as (fake, url), ProviderHttp(10.0) as http:

            async def payload() -> dict[str, Any]:
                return {"amount": 1250, "currency": "eur"}

            async def effects_under(key: str) -> int:
                made = [*fake.intents.values(), *fake.refunds.values()]
                created = sum(1 for item in made if item["metadata"].get("op_key") == key)
                return created + list(fake.confirmed_under.values()).count(key)

            async def slow_down(seconds: float) -> None:
                fake.hold_s = seconds

            async def on_the_fake(path: str, form: dict[str, Any]) -> dict[str, Any]:
                # A request of the fake's own client, not of the adapter under test.
                made = await http.request(
                    "POST",
                    url + path,
                    data=urlencode(form),
                    headers={
                        "Authorization": f"Bearer {API_KEY}",
                        "Content-Type": "application/x-www-form-urlencoded",
                        "Idempotency-Key": f"kit-fake-{uuid.uuid4()}",
                    },
                )
                assert made.status == 200, made.body
                answer: dict[str, Any] = json.loads(made.body)
                return answer

            async def declined() -> dict[str, Any]:
                # An intent whose card is declined until it is funded: its confirm is a
                # 402 card_error (a decline Stripe replays).
                card = f"pm_kit_{uuid.uuid4().hex}"
                fake.declining.add(card)
                intent = await on_the_fake(
                    "/v1/payment_intents",
                    {"amount": 1250, "currency": "eur", "payment_method": card},
                )
                return {"payment_intent": intent["id"], "payment_method": card}

            async def fund(payload: dict[str, Any]) -> None:
                fake.declining.discard(payload["payment_method"])

            async def uncharged() -> dict[str, Any]:
                # A refund of an intent not charged yet: 400 invalid_request_error, a
                # refusal of the state the endpoint found (saved and replayed by Stripe,
                # unlike a 400 of parameters that failed validation).
                intent = await on_the_fake(
                    "/v1/payment_intents",
                    {"amount": 1250, "currency": "eur", "payment_method": "pm_card_visa"},
                )
                return {"payment_intent": intent["id"], "amount": 100}

            async def charge(refund: dict[str, Any]) -> None:
                await on_the_fake(f"/v1/payment_intents/{refund['payment_intent']}/confirm", {})

            yield Live(
                adapter=StripeAdapter(http, url, API_KEY, clock=fake.clock),
                operation=self.answers.operation,
                now=fake.clock,
                payload=payload,
                other=lambda p: {**p, "amount": p["amount"] + 1},
                effects_under=effects_under,
                slow_down=slow_down,
                expire_keys=lambda: fake.clock.advance(RETENTION_S + 3600),
                refusals=(
                    RefusalFacts("payment_intents.confirm", declined, fund),
                    RefusalFacts("refunds.create", uncharged, charge),
                ),
            )


BUILT_IN: list[KitTarget] = [SandboxTarget(), StripeFakeTarget()]
