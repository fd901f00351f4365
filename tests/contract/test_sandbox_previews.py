"""docs/contract.md, sandbox additions: a `preview` mode of every operation (`POST .../preview`)
answers what the call would do from the provider's current state, and records nothing."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from support.sandbox_process import Sandbox

from services.devtools.sandbox.effect_pages import every_effect


async def test_every_operation_has_a_preview_that_records_no_effect(sandbox: Sandbox) -> None:
    # The list is read in pages (effect_pages.every_effect): a module's sandbox keeps every
    # effect its tests made, and one unpaged answer is bounded by nothing.
    async with httpx.AsyncClient(base_url=sandbox.url, timeout=10.0) as client:
        tag = uuid.uuid4().hex[:8]
        # The state the stateful previews read: a charge to refund, a waitlist, a record.
        charge = await client.post(
            "/v1/payments/charge",
            json={"amount": 1000, "currency": "usd", "customer": "cus_1", "metadata": {}},
            headers={"Idempotency-Key": f"seed-charge-{tag}"},
        )
        assert charge.status_code == 200, charge.text
        waitlist = {"resource": f"wl-{tag}", "users": ["u1", "u2"], "revision": 1}
        assert (await client.post("/v1/waitlists", json=waitlist)).status_code == 201
        record = {"resource": f"rec-{tag}", "data": {"a": 1}, "revision": 1}
        assert (await client.post("/v1/records", json=record)).status_code == 201
        before = await every_effect(client, sandbox.url)

        payloads: dict[str, dict[str, Any]] = {
            "payments.charge": {"amount": 500, "currency": "usd", "customer": "cus_2"},
            "payments.refund": {"charge_id": charge.json()["id"], "amount": 300},
            "inventory.reserve": {"sku": "sku-1", "quantity": 1},
            "inventory.release": {"sku": "sku-1", "quantity": 1},
            "email.send": {"to": "a@example.com", "subject": "hi", "body": "hello"},
            "waitlist.promote": {"resource": f"wl-{tag}", "user": "u2"},
            "records.delete": {"resource": f"rec-{tag}", "expected_revision": 1},
        }
        for operation, payload in payloads.items():
            path = "/v1/" + operation.replace(".", "/") + "/preview"
            answer = await client.post(path, json={**payload, "metadata": {}})
            assert answer.status_code == 200, (operation, answer.text)
            assert isinstance(answer.json(), dict), operation

        assert await every_effect(client, sandbox.url) == before
        assert (await client.get(f"/v1/records/rec-{tag}")).json()["deleted"] is False
        assert (await client.get(f"/v1/waitlists/wl-{tag}")).json()["revision"] == 1
