"""Contract of the sandbox provider, checked over HTTP against the real process.

The service runs as a subprocess exactly as `make run` starts it, with a throwaway SQLite file.
Every test uses fresh idempotency keys, and armed faults are disarmed after each test, so the
tests share one process without seeing each other.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.sandbox_process import Sandbox, start_sandbox, stop

from services.devtools.sandbox.effect_pages import every_effect
from services.devtools.sandbox.pages import MAX_PAGE


def new_key() -> str:
    return f"test-{uuid.uuid4()}"


def charge_payload(**overrides: Any) -> dict[str, Any]:
    return {"amount": 1250, "currency": "eur", "customer": "cus_123", **overrides}


def post(
    client: httpx.Client,
    operation: str,
    key: str | None,
    payload: dict[str, Any],
    op_key: str = "op-1",
    **kwargs: Any,
) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    body = {**payload, "metadata": {"op_key": op_key}}
    return client.post(f"/v1/{operation.replace('.', '/')}", json=body, headers=headers, **kwargs)


def lookup(client: httpx.Client, key: str) -> list[dict[str, Any]]:
    response = client.get("/v1/effects", params={"idempotency_key": key})
    assert response.status_code == 200, response.text
    effects: list[dict[str, Any]] = response.json()["effects"]
    return effects


def arm(client: httpx.Client, **fault: Any) -> None:
    response = client.post("/v1/faults", json=fault)
    assert response.status_code == 201, response.text


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.02)


# --- the happy path and idempotency -------------------------------------------------------


def test_healthz(client: httpx.Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_charge_succeeds_and_records_one_effect(client: httpx.Client) -> None:
    key = new_key()
    response = post(client, "payments.charge", key, charge_payload(), op_key="op-charge")

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"].startswith("ch_")
    assert body["status"] == "succeeded"
    assert body["operation"] == "payments.charge"
    assert body["idempotency_key"] == key
    assert body["payload"] == charge_payload()
    assert body["created_at"].endswith("Z")

    [effect] = lookup(client, key)
    assert effect["id"] == body["id"]
    assert effect["operation"] == "payments.charge"
    assert effect["idempotency_key"] == key
    assert effect["payload"] == charge_payload()
    assert effect["metadata"] == {"op_key": "op-charge"}
    assert effect["status"] == "succeeded"
    assert effect["created_at"] == body["created_at"]


@pytest.mark.parametrize(
    ("operation", "prefix", "payload"),
    [
        ("payments.refund", "rf_", {"charge": "ch_1", "amount": 100}),
        ("inventory.reserve", "rs_", {"sku": "sku-1", "quantity": 2}),
        ("inventory.release", "rl_", {"reservation": "rs_1"}),
        ("email.send", "em_", {"to": "ana@example.com", "subject": "Ñandú ✓"}),
    ],
)
def test_every_operation_records_effects_with_its_prefix(
    client: httpx.Client, operation: str, prefix: str, payload: dict[str, Any]
) -> None:
    key = new_key()
    response = post(client, operation, key, payload)
    assert response.status_code == 200, response.text
    assert response.json()["id"].startswith(prefix)
    [effect] = lookup(client, key)
    assert (effect["operation"], effect["payload"]) == (operation, payload)


def test_replay_with_same_payload_returns_original_response_and_no_new_effect(
    client: httpx.Client,
) -> None:
    key = new_key()
    first = post(client, "payments.charge", key, charge_payload(), op_key="op-a")
    # Metadata is correlation data, not part of the fingerprint: still the same request.
    second = post(client, "payments.charge", key, charge_payload(), op_key="op-b")

    assert first.status_code == second.status_code == 200
    assert second.json() == first.json()
    [effect] = lookup(client, key)
    assert effect["metadata"] == {"op_key": "op-a"}


def test_same_key_with_different_payload_is_rejected(client: httpx.Client) -> None:
    key = new_key()
    assert post(client, "payments.charge", key, charge_payload()).status_code == 200

    response = post(client, "payments.charge", key, charge_payload(amount=9999))

    assert response.status_code == 409
    assert response.json()["error"] == "idempotency_key_reused"
    assert response.json()["message"]
    [effect] = lookup(client, key)
    assert effect["payload"]["amount"] == 1250


def test_keys_are_scoped_to_the_whole_provider(client: httpx.Client) -> None:
    key = new_key()
    assert post(client, "payments.charge", key, charge_payload()).status_code == 200

    response = post(client, "payments.refund", key, {"charge": "ch_1", "amount": 1250})

    assert response.status_code == 409
    assert response.json()["error"] == "idempotency_key_reused"
    assert [e["operation"] for e in lookup(client, key)] == ["payments.charge"]


def test_missing_idempotency_key_is_a_400(client: httpx.Client) -> None:
    response = post(client, "payments.charge", None, charge_payload())
    assert response.status_code == 400
    assert response.json()["error"] == "missing_idempotency_key"
    assert "Idempotency-Key" in response.json()["message"]


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"charge"', b"not json", b""])
def test_bodies_that_are_not_json_objects_are_a_400(client: httpx.Client, raw: bytes) -> None:
    key = new_key()
    response = client.post(
        "/v1/payments/charge",
        content=raw,
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"] in {"invalid_json", "invalid_body"}
    assert lookup(client, key) == []


# --- definitive refusals ---------------------------------------------------------------------


def test_declined_charge_is_a_402_remembered_under_its_key_without_effect(
    client: httpx.Client,
) -> None:
    key = new_key()
    first = post(client, "payments.charge", key, charge_payload(customer="cus_decline"))
    again = post(client, "payments.charge", key, charge_payload(customer="cus_decline"))

    assert first.status_code == again.status_code == 402
    assert first.json()["error"] == "card_declined"
    assert again.json() == first.json()
    assert lookup(client, key) == []
    # The refused key is spent: it cannot be recycled for a different charge.
    assert post(client, "payments.charge", key, charge_payload()).status_code == 409


def test_out_of_stock_reservation_is_a_422_without_effect(client: httpx.Client) -> None:
    key = new_key()
    response = post(client, "inventory.reserve", key, {"sku": "sku-out-of-stock", "quantity": 1})

    assert response.status_code == 422
    assert response.json()["error"] == "out_of_stock"
    assert lookup(client, key) == []


# --- listing ---------------------------------------------------------------------------------


def test_listing_returns_every_effect_and_filters_by_operation(client: httpx.Client) -> None:
    charge_key, email_key = new_key(), new_key()
    charge = post(client, "payments.charge", charge_key, charge_payload()).json()
    email = post(client, "email.send", email_key, {"to": "bo@example.com"}).json()

    everything = client.get("/v1/effects").json()["effects"]
    emails = client.get("/v1/effects", params={"operation": "email.send"}).json()["effects"]

    assert {charge["id"], email["id"]} <= {e["id"] for e in everything}
    assert email["id"] in {e["id"] for e in emails}
    assert {e["operation"] for e in emails} == {"email.send"}
    bad = client.get("/v1/effects", params={"operation": "payments.teleport"})
    assert bad.status_code == 400


def test_the_listing_pages_newest_first_from_created_gte(client: httpx.Client) -> None:
    # The drift scan's read: its window only, in pages like Stripe's lists.
    made = [
        post(client, "email.send", new_key(), {"to": f"p{i}@example.com"}).json()["id"]
        for i in range(3)
    ]
    first = client.get("/v1/effects", params={"limit": 2}).json()
    assert [e["id"] for e in first["effects"]] == made[::-1][:2] and first["has_more"]
    after = first["effects"][-1]["id"]
    second = client.get("/v1/effects", params={"limit": 2, "starting_after": after}).json()
    assert second["effects"][0]["id"] == made[0]

    created = first["effects"][0]["created_at"].replace("Z", "+00:00")
    windowed = client.get("/v1/effects", params={"limit": 100, "created_gte": created}).json()
    # The newest effect's instant: it and any made in its millisecond, nothing older.
    assert made[-1] in [e["id"] for e in windowed["effects"]] and not windowed["has_more"]
    assert all(e["created_at"] >= first["effects"][0]["created_at"] for e in windowed["effects"])

    bad_params: list[dict[str, str | int]] = [
        {"limit": 0},
        {"limit": 101},
        {"limit": 5, "created_gte": "yesterday"},
    ]
    for bad in bad_params:
        assert client.get("/v1/effects", params=bad).status_code == 400


def test_the_listing_stops_below_created_lt_and_refuses_a_bad_instant(
    client: httpx.Client,
) -> None:
    # The drift scan's read of a hole below a cut listing (reconcilers.drift_span.Hole).
    made = [
        post(client, "email.send", new_key(), {"to": f"lt{i}@example.com"}).json()["id"]
        for i in range(2)
    ]
    newest = client.get("/v1/effects", params={"limit": 1}).json()["effects"][0]
    assert newest["id"] == made[-1]
    until = newest["created_at"].replace("Z", "+00:00")
    below = client.get("/v1/effects", params={"limit": 100, "created_lt": until}).json()
    assert all(e["created_at"] < newest["created_at"] for e in below["effects"])
    assert made[-1] not in [e["id"] for e in below["effects"]]

    listed = client.get("/v1/effects").json()["effects"]
    for bad in ("yesterday", "2026-12-06T03:00:00", "2026-12-06T03:00:00+00:00" + " " * 40):
        answer = client.get("/v1/effects", params={"limit": 5, "created_lt": bad})
        assert answer.status_code == 400, bad
        assert answer.json()["error"] == "invalid_created_lt", answer.text
    assert client.get("/v1/effects").json()["effects"] == listed  # nothing changed


def test_the_paged_reader_reads_what_the_unpaged_list_holds(
    sandbox: Sandbox, client: httpx.Client
) -> None:
    # The devtools' and tests' reader (chaos collect, recon_client.effects) pages, so it
    # keeps working past the size the one-body answer outgrows; it reads the same list.
    for i in range(MAX_PAGE + 5):
        post(client, "email.send", new_key(), {"to": f"r{i}@example.com"})
    whole = client.get("/v1/effects").json()["effects"]

    async def read(operation: str | None) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=30) as reader:
            return await every_effect(reader, sandbox.url, operation)

    assert [e["id"] for e in asyncio.run(read(None))] == [e["id"] for e in whole]
    emails = [e for e in whole if e["operation"] == "email.send"]
    assert asyncio.run(read("email.send")) == emails


def test_lookup_of_unknown_key_is_empty(client: httpx.Client) -> None:
    assert lookup(client, new_key()) == []


# --- faults ----------------------------------------------------------------------------------


def test_lose_response_after_commit_times_out_but_effect_exists(
    client: httpx.Client, sandbox: Sandbox
) -> None:
    key = new_key()
    arm(client, operation="payments.charge", mode="lose_response_after_commit")

    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        post(client, "payments.charge", key, charge_payload(), timeout=1.0)
    assert time.monotonic() - started < 3

    [effect] = lookup(client, key)
    # Replaying under the same key is how a client recovers the answer it lost.
    replay = post(client, "payments.charge", key, charge_payload())
    assert replay.status_code == 200
    assert replay.json()["id"] == effect["id"]
    assert len(lookup(client, key)) == 1


def test_a_held_lost_response_does_not_block_other_requests(client: httpx.Client) -> None:
    key = new_key()
    arm(client, operation="email.send", mode="lose_response_after_commit")
    with httpx.Client(base_url=str(client.base_url), timeout=1.5) as slow:
        # Start the held request on its own connection, then talk over another one meanwhile.
        outcome: list[BaseException] = []

        def send() -> None:
            try:
                post(slow, "email.send", key, {"to": "cy@example.com"})
            except httpx.HTTPError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=send)
        thread.start()
        wait_for(lambda: len(lookup(client, key)) == 1)
        assert client.get("/healthz", timeout=1.0).status_code == 200
        thread.join()
    assert len(outcome) == 1 and isinstance(outcome[0], httpx.ReadTimeout)


def test_error_500_after_commit_records_the_effect(client: httpx.Client) -> None:
    key = new_key()
    arm(client, operation="payments.charge", mode="error_500_after_commit")

    response = post(client, "payments.charge", key, charge_payload())

    assert response.status_code == 500
    assert len(lookup(client, key)) == 1
    # Only the next call was armed.
    assert post(client, "payments.charge", key, charge_payload()).status_code == 200


def test_error_500_before_commit_records_nothing(client: httpx.Client) -> None:
    key = new_key()
    arm(client, operation="payments.charge", mode="error_500_before_commit")

    response = post(client, "payments.charge", key, charge_payload())

    assert response.status_code == 500
    assert lookup(client, key) == []
    # The key is not spent: a retry under it performs the effect once.
    assert post(client, "payments.charge", key, charge_payload()).status_code == 200
    assert len(lookup(client, key)) == 1


def test_fault_is_scoped_to_its_operation_and_times(client: httpx.Client) -> None:
    arm(client, operation="payments.refund", mode="error_500_before_commit", times=2)

    assert post(client, "payments.charge", new_key(), charge_payload()).status_code == 200
    refund = {"charge": "ch_1", "amount": 1}
    assert post(client, "payments.refund", new_key(), refund).status_code == 500
    assert post(client, "payments.refund", new_key(), refund).status_code == 500
    assert post(client, "payments.refund", new_key(), refund).status_code == 200


def test_delay_slows_the_answer_then_behaves_normally(client: httpx.Client) -> None:
    key = new_key()
    arm(client, operation="inventory.reserve", mode="delay", delay_ms=300)

    started = time.monotonic()
    response = post(client, "inventory.reserve", key, {"sku": "sku-2", "quantity": 1})

    assert time.monotonic() - started >= 0.3
    assert response.status_code == 200
    assert len(lookup(client, key)) == 1


def test_pending_answers_202_and_the_effect_appears_after_the_delay(client: httpx.Client) -> None:
    key = new_key()
    arm(client, operation="payments.charge", mode="pending", delay_ms=400)

    response = post(client, "payments.charge", key, charge_payload())

    assert response.status_code == 202
    assert response.json()["status"] == "pending"
    effect_id = response.json()["id"]
    assert lookup(client, key) == []
    assert effect_id not in {e["id"] for e in client.get("/v1/effects").json()["effects"]}
    wait_for(lambda: len(lookup(client, key)) == 1)
    [effect] = lookup(client, key)
    assert (effect["id"], effect["status"]) == (effect_id, "succeeded")
    replay = post(client, "payments.charge", key, charge_payload())
    assert (replay.status_code, replay.json()["id"]) == (200, effect_id)


def test_lookup_unavailable_answers_503_then_recovers(client: httpx.Client) -> None:
    key = new_key()
    assert post(client, "payments.charge", key, charge_payload()).status_code == 200
    arm(client, mode="lookup_unavailable", times=1)

    first = client.get("/v1/effects", params={"idempotency_key": key})

    assert first.status_code == 503
    assert first.json()["error"] == "lookup_unavailable"
    assert len(lookup(client, key)) == 1


def test_lookup_unavailable_for_an_operation_spares_other_operations(
    client: httpx.Client,
) -> None:
    email_key, charge_key = new_key(), new_key()
    assert post(client, "email.send", email_key, {"to": "d@example.com"}).status_code == 200
    assert post(client, "payments.charge", charge_key, charge_payload()).status_code == 200
    arm(client, operation="payments.charge", mode="lookup_unavailable")

    assert len(lookup(client, email_key)) == 1
    unavailable = client.get("/v1/effects", params={"idempotency_key": charge_key})
    assert unavailable.status_code == 503
    assert len(lookup(client, charge_key)) == 1


def test_faults_can_be_listed_and_disarmed(client: httpx.Client) -> None:
    arm(client, operation="email.send", mode="error_500_before_commit", times=3)

    [fault] = client.get("/v1/faults").json()["faults"]
    assert fault == {
        "operation": "email.send",
        "mode": "error_500_before_commit",
        "remaining": 3,
        "delay_ms": 0,
    }
    assert client.delete("/v1/faults").json() == {"disarmed": 1}
    assert client.get("/v1/faults").json() == {"faults": []}
    assert post(client, "email.send", new_key(), {"to": "e@example.com"}).status_code == 200


@pytest.mark.parametrize(
    "fault",
    [
        {"operation": "payments.charge", "mode": "explode"},
        {"operation": "payments.teleport", "mode": "delay"},
        {"mode": "error_500_after_commit"},
        {"operation": "payments.charge", "mode": "delay", "times": 0},
        {"operation": "payments.charge", "mode": "delay", "delay_ms": -1},
    ],
)
def test_invalid_faults_are_rejected_with_a_message(
    client: httpx.Client, fault: dict[str, Any]
) -> None:
    response = client.post("/v1/faults", json=fault)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_fault"
    assert response.json()["message"]
    assert client.get("/v1/faults").json() == {"faults": []}


# --- durability ------------------------------------------------------------------------------


def test_effects_and_keys_survive_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "restart.sqlite3"
    key = new_key()
    first = start_sandbox(db)
    try:
        with httpx.Client(base_url=first.url, timeout=5.0) as c:
            original = post(c, "payments.charge", key, charge_payload()).json()
    finally:
        stop(first.process)

    second = start_sandbox(db)
    try:
        with httpx.Client(base_url=second.url, timeout=5.0) as c:
            replay = post(c, "payments.charge", key, charge_payload())
            assert replay.json() == original
            assert post(c, "payments.charge", key, charge_payload(amount=1)).status_code == 409
            assert [e["id"] for e in lookup(c, key)] == [original["id"]]
    finally:
        stop(second.process)
