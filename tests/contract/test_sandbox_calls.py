"""`GET /v1/calls`: the sandbox logs every apply and lookup per key, replays included.

This is what the "nothing sent twice" tests assert on: the effects table cannot show a second
call under one key (the store replays it), the call log does.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

CHARGE = {"amount": 1250, "currency": "eur", "customer": "cus_123"}


def charge(client: httpx.Client, key: str, **overrides: Any) -> httpx.Response:
    return client.post(
        "/v1/payments/charge", json={**CHARGE, **overrides}, headers={"Idempotency-Key": key}
    )


def calls(client: httpx.Client, **params: str) -> list[tuple[str, str | None, str]]:
    response = client.get("/v1/calls", params=params)
    assert response.status_code == 200, response.text
    listed: list[dict[str, Any]] = response.json()["calls"]
    seqs = [c["seq"] for c in listed]
    assert seqs == sorted(seqs), "calls are listed in arrival order"
    assert all(c["at"].endswith("Z") for c in listed)
    return [(c["kind"], c["operation"], c["outcome"]) for c in listed]


def test_a_lookup_an_apply_and_a_replay_are_three_calls_in_order(client: httpx.Client) -> None:
    key = f"calls-{uuid.uuid4()}"
    client.get("/v1/effects", params={"idempotency_key": key})
    assert charge(client, key).status_code == 200
    assert charge(client, key).status_code == 200
    client.get("/v1/effects", params={"idempotency_key": key})

    assert calls(client, idempotency_key=key) == [
        ("lookup", None, "absent"),
        ("apply", "payments.charge", "applied"),
        ("apply", "payments.charge", "replayed"),
        ("lookup", "payments.charge", "found"),
    ]


def test_refusals_reuse_and_injected_faults_are_calls_too(client: httpx.Client) -> None:
    declined, reused, faulted = (f"calls-{uuid.uuid4()}" for _ in range(3))
    assert charge(client, declined, customer="cus_decline").status_code == 402
    assert charge(client, reused).status_code == 200
    assert charge(client, reused, amount=1).status_code == 409
    client.post(
        "/v1/faults", json={"operation": "payments.charge", "mode": "error_500_before_commit"}
    )
    assert charge(client, faulted).status_code == 500
    client.post("/v1/faults", json={"operation": "payments.charge", "mode": "lookup_unavailable"})
    assert client.get("/v1/effects", params={"idempotency_key": reused}).status_code == 503

    assert calls(client, idempotency_key=declined) == [("apply", "payments.charge", "refused")]
    assert calls(client, idempotency_key=reused) == [
        ("apply", "payments.charge", "applied"),
        ("apply", "payments.charge", "key_reused"),
        ("lookup", "payments.charge", "unavailable"),
    ]
    assert calls(client, idempotency_key=faulted) == [("apply", "payments.charge", "failed")]


def test_calls_filter_by_operation(client: httpx.Client) -> None:
    key = f"calls-{uuid.uuid4()}"
    response = client.post(
        "/v1/email/send", json={"to": "a@example.com"}, headers={"Idempotency-Key": key}
    )
    assert response.status_code == 200
    emails = calls(client, operation="email.send")
    assert ("apply", "email.send", "applied") in emails
    assert {operation for _, operation, _ in emails} == {"email.send"}
