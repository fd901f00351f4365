"""`GET /v1/calls`: the sandbox logs every apply and lookup per key, replays included.

This is what the "nothing sent twice" tests assert on: the effects table cannot show a second
call under one key (the store replays it), the call log does.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from support.sandbox_process import Sandbox

from services.devtools.sandbox.call_pages import every_call
from services.devtools.sandbox.pages import MAX_PAGE

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


# --- pages: the same log, a bounded page at a time ------------------------------------


def test_pages_list_the_log_in_arrival_order_after_the_last_seq_read(client: httpx.Client) -> None:
    key = f"calls-{uuid.uuid4()}"
    for _ in range(5):  # five lookups of a key never applied: five calls under it
        client.get("/v1/effects", params={"idempotency_key": key})
    whole = client.get("/v1/calls", params={"idempotency_key": key}).json()
    # Asked without `limit`, the one-body answer as before pages: no `has_more`.
    assert set(whole) == {"calls"} and len(whole["calls"]) == 5

    pages, after = [], None
    while True:
        params = {"idempotency_key": key, "limit": "2"}
        if after is not None:
            params["starting_after"] = str(after)
        answer = client.get("/v1/calls", params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        pages.append([c["seq"] for c in page["calls"]])
        if not page["has_more"]:
            break
        after = page["calls"][-1]["seq"]
    seqs = [c["seq"] for c in whole["calls"]]
    assert pages == [seqs[:2], seqs[2:4], seqs[4:]]


def test_the_paged_reader_reads_what_the_unpaged_list_holds(
    sandbox: Sandbox, client: httpx.Client
) -> None:
    # The chaos collector and tests' recon_client read through every_call: past a page.
    key = f"calls-{uuid.uuid4()}"
    for _ in range(MAX_PAGE + 3):
        client.get("/v1/effects", params={"idempotency_key": key})
    mine = client.get("/v1/calls", params={"idempotency_key": key}).json()["calls"]
    whole = client.get("/v1/calls").json()["calls"]

    async def read(key: str | None) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=30) as reader:
            return await every_call(reader, sandbox.url, key)

    assert len(mine) == MAX_PAGE + 3 and asyncio.run(read(key)) == mine
    assert asyncio.run(read(None)) == whole


@pytest.mark.parametrize(
    "bad",
    [
        {"limit": "0"},
        {"limit": str(MAX_PAGE + 1)},
        {"limit": "ten"},
        {"limit": "9" * 40},
        {"starting_after": "5"},  # a cursor without a page size
        {"limit": "5", "starting_after": "call_1"},
        {"limit": "5", "starting_after": "-1"},
        {"limit": "5", "starting_after": "9" * 19},
    ],
)
def test_a_page_size_or_cursor_out_of_bounds_is_a_400_that_says_so(
    client: httpx.Client, bad: dict[str, str]
) -> None:
    answer = client.get("/v1/calls", params=bad)
    assert answer.status_code == 400, answer.text
    cursor_refused = bad.get("limit") == "5"
    assert answer.json()["error"] == (
        "invalid_starting_after" if cursor_refused else "invalid_limit"
    )
