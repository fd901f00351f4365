"""Seed 004's payments in the sandbox: a charge's refundable balance, partial refunds, an
operator's refund from the dashboard and a revoked authorization (over HTTP)."""

from __future__ import annotations

import uuid

import httpx


def _post(client: httpx.Client, path: str, body: dict[str, object]) -> httpx.Response:
    return client.post(path, json=body, headers={"Idempotency-Key": f"k-{uuid.uuid4()}"})


def test_refunds_draw_down_the_balance_and_the_dashboard_and_revocation_count(
    client: httpx.Client,
) -> None:
    charge = _post(client, "/v1/payments/charge", {"amount": 1000, "customer": "cus_1"})
    charge_id = charge.json()["id"]
    assert _post(client, "/v1/payments/refund", {"charge": charge_id, "amount": 300}).is_success
    outside = client.post("/v1/dashboard/refund", json={"charge": charge_id, "amount": 500})
    assert outside.status_code == 200 and outside.json()["effect"]["metadata"] == {
        "source": "dashboard"
    }
    balance = client.get(f"/v1/charges/{charge_id}/balance").json()
    assert (balance["refunded"], balance["refundable"], balance["revoked"]) == (800, 200, False)
    # More than is left: refused, no effect.
    over = _post(client, "/v1/payments/refund", {"charge": charge_id, "amount": 201})
    assert over.status_code == 422 and over.json()["error"] == "amount_exceeds_refundable"
    client.post("/v1/dashboard/revoke", json={"charge": charge_id})
    revoked = _post(client, "/v1/payments/refund", {"charge": charge_id, "amount": 100})
    assert revoked.status_code == 422 and revoked.json()["error"] == "authorization_revoked"
    assert client.get(f"/v1/charges/{charge_id}/balance").json()["refundable"] == 200
    client.post("/v1/dashboard/reinstate", json={"charge": charge_id})
    assert client.get(f"/v1/charges/{charge_id}/balance").json()["revoked"] is False
    assert _post(client, "/v1/payments/refund", {"charge": charge_id, "amount": 100}).is_success
    assert client.get("/v1/charges/ch_unknown/balance").status_code == 404
    # A refund naming no charge of this sandbox (a saga's undo) is not held to a balance.
    assert _post(client, "/v1/payments/refund", {"amount": 5000}).is_success
