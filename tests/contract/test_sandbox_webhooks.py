"""Webhooks out of the sandbox provider, checked against the real process and a real receiver.

A small HTTP receiver runs in a thread and records every delivery; the sandbox runs as a
subprocess exactly as `make run` starts it, pointed at the receiver with `--webhook-url`. Each
test finds its own deliveries by the fresh idempotency key of the effect they announce, and
every signature is checked with recon's own verifier (reconcilers.signatures).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.sandbox_process import REPO_ROOT, Sandbox, command, start_sandbox, stop

from reconcilers.signatures import Scheme, verify
from services.devtools.ports import free_port
from services.devtools.sandbox.effect_pages import every_effect
from services.devtools.sandbox.webhook_config import RedeliveryPolicy

SECRET = "whsec_c2FuZGJveC1kZXYtc2VjcmV0"


# --- the receiver ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic()

    @property
    def event(self) -> dict[str, Any]:
        event: dict[str, Any] = json.loads(self.body)
        return event

    @property
    def effect(self) -> dict[str, Any]:
        effect: dict[str, Any] = self.event["data"]["effect"]
        return effect


class Receiver:
    """Records every POST; answers 500 to the first deliveries of keys told to fail."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._failures: dict[str, int] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                status = receiver._record(Received(headers, body, time.monotonic()))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                del format, args  # keep test output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks"

    def _record(self, received: Received) -> int:
        key = received.effect["idempotency_key"]
        with self._lock:
            self._received.append(received)
            if self._failures.get(key, 0) > 0:
                self._failures[key] -= 1
                return 500
        return 204

    def fail_next(self, key: str, times: int) -> None:
        with self._lock:
            self._failures[key] = times

    def for_key(self, key: str) -> list[Received]:
        with self._lock:
            return [r for r in self._received if r.effect["idempotency_key"] == key]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- the sandbox -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[Sandbox]:
    db = tmp_path_factory.mktemp("webhooks") / "sandbox.sqlite3"
    running = start_sandbox(db, "--webhook-url", receiver.url)
    yield running
    stop(running.process)


# --- helpers ---------------------------------------------------------------------------------


def new_key() -> str:
    return f"test-{uuid.uuid4()}"


def charge(client: httpx.Client, key: str, **overrides: Any) -> dict[str, Any]:
    payload = {"amount": 1250, "currency": "eur", "customer": "cus_123", **overrides}
    response = client.post(
        "/v1/payments/charge",
        json={**payload, "metadata": {"op_key": "op-webhook"}},
        headers={"Idempotency-Key": key},
    )
    assert response.status_code in {200, 202}, response.text
    body: dict[str, Any] = response.json()
    return body


def arm(client: httpx.Client, **fault: Any) -> None:
    response = client.post("/v1/faults", json=fault)
    assert response.status_code == 201, response.text


def deliveries(client: httpx.Client, effect_id: str) -> list[dict[str, Any]]:
    response = client.get("/v1/webhooks/deliveries", params={"effect_id": effect_id})
    assert response.status_code == 200, response.text
    listed: list[dict[str, Any]] = response.json()["deliveries"]
    return listed


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.02)


def wait_for_count(
    receiver: Receiver, key: str, count: int, timeout: float = 5.0
) -> list[Received]:
    wait_for(lambda: len(receiver.for_key(key)) >= count, timeout)
    return receiver.for_key(key)


def settled(client: httpx.Client, effect_id: str, attempts: int) -> None:
    """Barrier for "nothing more is sent": the outbox is the only source of webhooks, and it
    sends only pending rows. Once the effect's row is no longer pending and has made
    `attempts` attempts (the provider-side counter), no further delivery can come."""

    def done() -> bool:
        [delivery] = deliveries(client, effect_id)
        return bool(delivery["status"] != "pending" and delivery["attempts"] == attempts)

    wait_for(done)


def verified_id(scheme: Scheme, received: Received) -> str:
    verified = verify(scheme, received.headers, received.body, [SECRET], now=int(time.time()))
    return verified.delivery_id


# --- one delivery per effect, signed ---------------------------------------------------------


def test_a_charge_is_announced_by_one_signed_standard_webhook(
    client: httpx.Client, receiver: Receiver
) -> None:
    key = new_key()
    created = charge(client, key)

    [received] = wait_for_count(receiver, key, 1)

    event = received.event
    assert verified_id(Scheme.STANDARD, received) == received.headers["webhook-id"] == event["id"]
    assert event["id"].startswith("evt_")
    assert event["type"] == "effect.succeeded"
    assert isinstance(event["created"], int) and abs(event["created"] - time.time()) < 60
    [listed] = client.get("/v1/effects", params={"idempotency_key": key}).json()["effects"]
    assert received.effect == listed
    assert received.effect["id"] == created["id"]
    assert received.headers["content-type"] == "application/json"
    wait_for(lambda: deliveries(client, created["id"])[0]["status"] == "delivered")
    [delivery] = deliveries(client, created["id"])
    assert (delivery["event_id"], delivery["attempts"]) == (event["id"], 1)
    settled(client, created["id"], attempts=1)
    assert len(receiver.for_key(key)) == 1


def test_the_stripe_scheme_signs_with_stripe_signature(tmp_path: Path, receiver: Receiver) -> None:
    stripe = start_sandbox(
        tmp_path / "stripe.sqlite3", "--webhook-url", receiver.url, "--webhook-scheme", "stripe"
    )
    try:
        with httpx.Client(base_url=stripe.url, timeout=10.0) as c:
            key = new_key()
            charge(c, key)
            [received] = wait_for_count(receiver, key, 1)
    finally:
        stop(stripe.process)

    assert received.headers["stripe-signature"].startswith("t=")
    assert "webhook-signature" not in received.headers
    assert verified_id(Scheme.STRIPE, received) == received.event["id"]


def test_a_refused_call_announces_nothing(client: httpx.Client, receiver: Receiver) -> None:
    key = new_key()
    response = client.post(
        "/v1/payments/charge",
        json={"amount": 1, "currency": "eur", "customer": "cus_decline"},
        headers={"Idempotency-Key": key},
    )
    assert response.status_code == 402

    # A delivery row is written in the same transaction as its effect: no effect, no row,
    # so nothing can ever be sent for this key.
    listed = client.get("/v1/webhooks/deliveries").json()["deliveries"]
    assert [d for d in listed if d["event"]["data"]["effect"]["idempotency_key"] == key] == []
    assert receiver.for_key(key) == []


def test_a_pending_effect_is_announced_once_it_is_visible(
    client: httpx.Client, receiver: Receiver
) -> None:
    key = new_key()
    arm(client, operation="payments.charge", mode="pending", delay_ms=700)
    started = time.monotonic()

    charge(client, key)
    [received] = wait_for_count(receiver, key, 1)

    assert received.at - started >= 0.7
    assert received.effect["status"] == "succeeded"


def test_webhook_delay_ms_sends_every_webhook_that_late(tmp_path: Path, receiver: Receiver) -> None:
    # A real provider's delivery queue announces an effect seconds after it, and what a
    # benchmark measures depends on it (docs/benchmark.md "Webhooks that come late").
    late = start_sandbox(
        tmp_path / "late.sqlite3", "--webhook-url", receiver.url, "--webhook-delay-ms", "800"
    )
    try:
        with httpx.Client(base_url=late.url, timeout=10.0) as c:
            keys = [new_key() for _ in range(3)]
            asked = []
            for key in keys:
                asked.append(time.monotonic())  # the effect is recorded after this
                charge(c, key)
            received = [wait_for_count(receiver, key, 1)[0] for key in keys]
            # Each one is late from its own effect, not only the first after a start.
            assert all(r.at - a >= 0.8 for r, a in zip(received, asked, strict=True))
            [listed] = deliveries(c, received[0].effect["id"])
    finally:
        stop(late.process)
    assert listed["status"] == "delivered" and listed["attempts"] == 1


# --- redelivery and persistence --------------------------------------------------------------


def test_a_failed_delivery_is_redelivered_with_the_same_id_and_body(
    client: httpx.Client, receiver: Receiver
) -> None:
    key = new_key()
    receiver.fail_next(key, times=2)

    created = charge(client, key)
    first, second, third = wait_for_count(receiver, key, 3, timeout=10.0)

    assert first.body == second.body == third.body
    ids = {verified_id(Scheme.STANDARD, r) for r in (first, second, third)}
    assert ids == {first.event["id"]}
    # Backoff: 0.5 s, then 1 s.
    assert second.at - first.at >= 0.4
    assert third.at - second.at >= 0.9
    wait_for(lambda: deliveries(client, created["id"])[0]["status"] == "delivered")
    [delivery] = deliveries(client, created["id"])
    assert delivery["attempts"] == 3
    assert delivery["delivered_at"] is not None


def test_pending_deliveries_survive_a_restart(tmp_path: Path, receiver: Receiver) -> None:
    db = tmp_path / "restart.sqlite3"
    key = new_key()
    nobody = f"http://127.0.0.1:{free_port()}/hooks"  # connection refused
    first = start_sandbox(db, "--webhook-url", nobody)
    try:
        with httpx.Client(base_url=first.url, timeout=10.0) as c:
            effect_id = charge(c, key)["id"]
            wait_for(lambda: deliveries(c, effect_id)[0]["attempts"] >= 1)
            [failing] = deliveries(c, effect_id)
    finally:
        stop(first.process)
    assert failing["status"] == "pending"
    assert failing["last_error"]

    second = start_sandbox(db, "--webhook-url", receiver.url)
    try:
        [received] = wait_for_count(receiver, key, 1, timeout=10.0)
    finally:
        stop(second.process)
    assert received.event["id"] == failing["event_id"]
    assert verified_id(Scheme.STANDARD, received) == failing["event_id"]


def test_redelivery_backs_off_exponentially_then_gives_up() -> None:
    policy = RedeliveryPolicy()
    delays = [policy.delay_after(n) for n in range(1, 11)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, None]


# --- webhook faults and replay ---------------------------------------------------------------


def test_webhook_duplicate_delivers_the_same_webhook_twice(
    client: httpx.Client, receiver: Receiver
) -> None:
    key = new_key()
    arm(client, operation="payments.charge", mode="webhook_duplicate")

    created = charge(client, key)
    first, second = wait_for_count(receiver, key, 2)

    assert first.body == second.body
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert verified_id(Scheme.STANDARD, second) == first.event["id"]
    settled(client, created["id"], attempts=2)
    assert len(receiver.for_key(key)) == 2


def test_webhook_drop_delivers_nothing_and_only_times_webhooks(
    client: httpx.Client, receiver: Receiver
) -> None:
    dropped_key, next_key = new_key(), new_key()
    arm(client, mode="webhook_drop", times=1)

    dropped = charge(client, dropped_key)
    wait_for(lambda: deliveries(client, dropped["id"])[0]["status"] == "dropped")
    charge(client, next_key)

    wait_for_count(receiver, next_key, 1)
    # A dropped row is never sent (barrier: its status, awaited above).
    assert receiver.for_key(dropped_key) == []
    assert deliveries(client, dropped["id"])[0]["attempts"] == 0
    # The effect itself stands: only its announcement was lost.
    listed = client.get("/v1/effects", params={"idempotency_key": dropped_key}).json()
    assert [e["id"] for e in listed["effects"]] == [dropped["id"]]


def test_webhook_delay_holds_the_delivery(client: httpx.Client, receiver: Receiver) -> None:
    key = new_key()
    arm(client, mode="webhook_delay", delay_ms=600)
    started = time.monotonic()

    charge(client, key)
    [received] = wait_for_count(receiver, key, 1)

    assert received.at - started >= 0.6


def test_webhook_reorder_releases_held_deliveries_in_reverse(
    client: httpx.Client, receiver: Receiver
) -> None:
    keys = [new_key(), new_key(), new_key()]
    arm(client, operation="payments.charge", mode="webhook_reorder", times=3, delay_ms=500)

    for key in keys:
        charge(client, key)
    arrivals = {key: wait_for_count(receiver, key, 1)[0].at for key in keys}

    assert arrivals[keys[2]] < arrivals[keys[1]] < arrivals[keys[0]]


def test_webhook_faults_need_no_operation_and_spare_calls(client: httpx.Client) -> None:
    for mode in ("webhook_duplicate", "webhook_delay", "webhook_drop", "webhook_reorder"):
        arm(client, mode=mode)
    arm(client, operation="payments.charge", mode="webhook_drop")

    # Armed webhook faults, even for payments.charge, never break the call itself.
    response = client.post(
        "/v1/payments/charge",
        json={"amount": 1, "currency": "eur", "customer": "cus_1"},
        headers={"Idempotency-Key": new_key()},
    )
    assert response.status_code == 200
    assert client.post("/v1/faults", json={"mode": "delay"}).status_code == 422


def test_replay_resends_the_same_webhook(client: httpx.Client, receiver: Receiver) -> None:
    key = new_key()
    created = charge(client, key)
    [original] = wait_for_count(receiver, key, 1)
    event_id = original.event["id"]

    for _ in range(2):
        replayed = client.post(f"/v1/webhooks/replay/{event_id}")
        assert replayed.status_code == 200, replayed.text
        assert replayed.json()["attempt"]["ok"] is True

    received = wait_for_count(receiver, key, 3)
    assert {r.body for r in received} == {original.body}
    assert {verified_id(Scheme.STANDARD, r) for r in received} == {event_id}
    [delivery] = deliveries(client, created["id"])
    assert (delivery["status"], delivery["attempts"]) == ("delivered", 3)
    assert client.post("/v1/webhooks/replay/evt_unknown").status_code == 404


def test_replay_delivers_a_dropped_webhook(client: httpx.Client, receiver: Receiver) -> None:
    key = new_key()
    arm(client, mode="webhook_drop")
    created = charge(client, key)
    wait_for(lambda: deliveries(client, created["id"])[0]["status"] == "dropped")
    event_id = deliveries(client, created["id"])[0]["event_id"]

    assert client.post(f"/v1/webhooks/replay/{event_id}").status_code == 200

    [received] = wait_for_count(receiver, key, 1)
    assert received.event["id"] == event_id
    assert deliveries(client, created["id"])[0]["status"] == "delivered"


# --- effects nobody intended -----------------------------------------------------------------


async def test_an_unrecorded_effect_is_listed_and_announced(
    receiver: Receiver, sandbox: Sandbox
) -> None:
    key = new_key()
    async with httpx.AsyncClient(base_url=sandbox.url, timeout=10.0) as client:
        response = await client.post(
            "/v1/effects/unrecorded",
            json={
                "operation": "payments.refund",
                "payload": {"charge": "ch_1", "amount": 300},
                "idempotency_key": key,
            },
        )
        assert response.status_code == 200, response.text
        effect_id = response.json()["id"]

        [received] = wait_for_count(receiver, key, 1)
        assert received.effect["id"] == effect_id
        assert received.effect["operation"] == "payments.refund"
        assert received.effect["metadata"] == {}
        # In pages (effect_pages.every_effect): the module's sandbox keeps every effect its
        # tests made, and one unpaged answer is bounded by nothing.
        listed = await every_effect(client, sandbox.url, "payments.refund")
    assert effect_id in {e["id"] for e in listed}


def test_an_unrecorded_effect_gets_a_key_of_its_own(client: httpx.Client) -> None:
    body = {"operation": "email.send", "payload": {"to": "x@example.com"}}
    first = client.post("/v1/effects/unrecorded", json=body)
    second = client.post("/v1/effects/unrecorded", json=body)

    assert first.status_code == second.status_code == 200
    assert first.json()["idempotency_key"] != second.json()["idempotency_key"]
    assert first.json()["idempotency_key"].startswith("unrecorded-")


@pytest.mark.parametrize(
    "body",
    [
        {"operation": "payments.teleport", "payload": {}},
        {"operation": "email.send"},
        {"operation": "email.send", "payload": {}, "idempotency_key": ""},
        {"operation": "email.send", "payload": {}, "tenant": "demo"},
    ],
)
def test_an_invalid_unrecorded_effect_is_a_422(client: httpx.Client, body: dict[str, Any]) -> None:
    response = client.post("/v1/effects/unrecorded", json=body)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_effect"
    assert response.json()["message"]


# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (["--webhook-url", "http://127.0.0.1:1/h", "--webhook-scheme", "svix"], "scheme"),
        (["--webhook-url", "http://127.0.0.1:1/h", "--webhook-secret", "whsec_!!"], "base64"),
        (["--webhook-url", "127.0.0.1:1/h"], "http(s) URL"),
        (["--webhook-url", "http://127.0.0.1:1/h", "--webhook-delay-ms", "-1"], "milliseconds"),
        (["--webhook-url", "http://127.0.0.1:1/h", "--webhook-delay-ms", "1.5"], "milliseconds"),
        (["--webhook-url", "http://127.0.0.1:1/h", "--webhook-delay-ms", "²"], "milliseconds"),
        (["--webhook-url", "http://127.0.0.1:1/h", "--webhook-delay-ms", "600001"], "600000"),
        (["--webhook-delay-ms", "100"], "needs --webhook-url"),
    ],
)
def test_bad_webhook_configuration_stops_the_process_at_start_up(
    tmp_path: Path, flags: list[str], complaint: str
) -> None:
    finished = subprocess.run(
        command(tmp_path / "bad.sqlite3", free_port(), *flags),
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert finished.returncode != 0
    assert complaint in finished.stderr.decode()


def test_replay_without_webhooks_says_how_to_enable_them(tmp_path: Path) -> None:
    plain = start_sandbox(tmp_path / "plain.sqlite3")
    try:
        response = httpx.post(f"{plain.url}/v1/webhooks/replay/evt_1", timeout=5.0)
        listed = httpx.get(f"{plain.url}/v1/webhooks/deliveries", timeout=5.0)
    finally:
        stop(plain.process)
    assert response.status_code == 409
    assert "--webhook-url" in response.json()["message"]
    assert listed.json() == {"deliveries": []}
