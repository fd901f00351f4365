"""The sandbox adapter against the real sandbox: a payload value that goes into a provider
path names one resource, never another route (issue 18, item 6), and what the balance
precondition keeps as evidence is the balance's own fields only."""

from __future__ import annotations

import uuid

import httpx
from support.sandbox_process import Sandbox

from services.providers.adapters import SandboxAdapter
from services.providers.http import ProviderHttp
from services.providers.preconditions import judge_balance

# The attack from the issue: with the segment unescaped this reads GET /v1/effects?operation=...
TRAVERSAL = "x/../../effects?operation=payments.charge&"
SECRET = {"amount": 4321, "currency": "usd", "customer": "cus_other_tenant"}


def _charge(client: httpx.Client, payload: dict[str, object]) -> str:
    answer = client.post(
        "/v1/payments/charge", json=payload, headers={"Idempotency-Key": f"k-{uuid.uuid4()}"}
    )
    assert answer.status_code == 200, answer.text
    charge_id: str = answer.json()["id"]
    return charge_id


async def test_a_charge_id_that_climbs_the_path_reads_no_other_route(
    sandbox: Sandbox, client: httpx.Client
) -> None:
    # Given another tenant's charge at the shared provider
    _charge(client, SECRET)
    async with ProviderHttp(timeout_s=5) as http:
        adapter = SandboxAdapter(http, sandbox.url)
        # When the precondition asks for the balance of crafted charge ids
        for crafted in (TRAVERSAL, "..", ".", "x#/../../effects", "x%2F..%2F..%2Feffects"):
            status, body = await adapter.balance(crafted)
            # Then the provider is asked about one (unknown) charge, or not at all
            assert status in (0, 404), (crafted, status, body)
            assert "cus_other_tenant" not in str(body)
            assert "effects" not in body
        # And a real charge id still reads its balance
        mine = _charge(client, {"amount": 700, "currency": "usd", "customer": "cus_1"})
        status, body = await adapter.balance(mine)
    assert status == 200 and body["refundable"] == 700


async def test_balance_evidence_keeps_only_the_balance_fields(
    sandbox: Sandbox, client: httpx.Client
) -> None:
    charge = _charge(client, {"amount": 300, "currency": "usd", "customer": "cus_1"})
    async with ProviderHttp(timeout_s=5) as http:
        status, body = await SandboxAdapter(http, sandbox.url).balance(charge)
    # A provider answer padded with fields nobody judged on (or another route's answer)
    padded = {**body, "effects": [SECRET], "note": "cus_other_tenant"}
    stopped = judge_balance({"charge": charge, "amount": 301}, status, padded)
    assert stopped is not None and stopped.body == {
        "precondition": "refundable_balance",
        "balance": {
            "charge": charge,
            "amount": 300,
            "refunded": 0,
            "refundable": 300,
            "revoked": False,
        },
    }
    # An answer that is no balance keeps nothing of itself either.
    unread = judge_balance({"charge": charge, "amount": 1}, 500, padded)
    assert unread is not None and unread.body == stopped.body["balance"]
