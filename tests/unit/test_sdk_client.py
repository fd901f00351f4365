"""The SDK's client behaviour against a scripted transport (httpx.MockTransport): wait()
returns on a step that needs a person, resends honour Retry-After and otherwise jitter,
errors carry the trace id the request was sent with and whether a retry is safe, and the
stable tx_id derivation is frozen."""

import random
from typing import Any

import httpx
import pytest
from recon_sdk import Conflict, Recon, Unavailable, ops, stable_tx_id
from recon_sdk import calls as sdk_calls

TX = {"tx_id": "t-1", "agent_id": "a", "operations": [], "compensation_plan": []}


def client(answers: list[httpx.Response], seen: list[httpx.Request]) -> Recon:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    return Recon(
        "http://recon", api_key="k", http=httpx.Client(transport=httpx.MockTransport(handle))
    )


def test_wait_returns_when_a_step_waits_for_an_approval(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[httpx.Request] = []
    running = httpx.Response(200, json={**TX, "status": "running"})
    gated = httpx.Response(200, json={**TX, "status": "awaiting_approval"})
    with client([running, gated], seen) as recon:
        tx = recon.wait("t-1", timeout=5, poll_s=0)
    assert tx.status == "awaiting_approval" and tx.needs_person and not tx.terminal
    assert len(seen) == 2


def test_a_resend_waits_as_long_as_retry_after_says(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("recon_sdk.client.time.sleep", slept.append)
    seen: list[httpx.Request] = []
    busy = httpx.Response(
        503, json={"error": "unavailable", "message": "x"}, headers={"Retry-After": "3"}
    )
    ok = httpx.Response(200, json={**TX, "status": "committed"})
    with client([busy, ok], seen) as recon:
        assert recon.get("t-1").status == "committed"
    assert slept == [3.0]
    # One trace for the call and its resend.
    assert seen[0].headers["traceparent"] == seen[1].headers["traceparent"]


def test_without_retry_after_resends_are_jittered_within_a_doubling_bound() -> None:
    rand = random.Random(7)
    waits = [sdk_calls.backoff(n, None, rand=rand) for n in range(6) for _ in range(50)]
    assert all(0 <= w <= 5.0 for w in waits)
    assert len({round(w, 6) for w in waits}) > 250  # not in step
    assert max(sdk_calls.backoff(0, None, rand=rand) for _ in range(100)) <= 0.2


def test_retry_after_as_an_http_date() -> None:
    assert sdk_calls.retry_after("Thu, 01 Jan 1970 00:00:10 GMT", now=4.0) == 6.0
    assert sdk_calls.retry_after("soon") is None


def test_an_error_names_its_trace_and_whether_a_retry_is_safe() -> None:
    seen: list[httpx.Request] = []
    duplicate: dict[str, Any] = {
        "error": "duplicate_intent",
        "message": "held",
        "duplicate_of": {"tx_id": "t-0", "status": "committed"},
    }
    pending = {"error": "intent_pending", "message": "retry in 5 s"}
    answers = [
        httpx.Response(409, json=duplicate),
        httpx.Response(409, json=pending, headers={"Retry-After": "5"}),
    ]
    tx = ops.transaction("t-1", "a", [ops.charge(100, "usd", "c", natural_key="order-1")])
    with client(answers, seen) as recon:
        with pytest.raises(Conflict) as refused:
            recon.submit(tx)
        assert not refused.value.retry_safe
        assert refused.value.duplicate_of == {"tx_id": "t-0", "status": "committed"}
        assert refused.value.trace_id and refused.value.trace_id in seen[0].headers["traceparent"]
        with pytest.raises(Conflict) as later:
            recon.submit(tx)
        assert later.value.retry_safe and later.value.retry_after == 5.0
    assert seen[0].read() and b'"natural_key":"order-1"' in seen[0].content


def test_an_unreachable_intake_is_a_safe_retry() -> None:
    assert Unavailable(0, "unreachable", "x").retry_safe


def test_the_stable_tx_id_is_frozen() -> None:
    # A changed derivation would make a resumed run's retry a new intent: never change it.
    assert stable_tx_id("run-1", "call_abc") == "tx-221baf4ec00c033813db7ddfd440ae1561883757"
    assert stable_tx_id("run-1", "call_abc", prefix="order").startswith("order-")
    assert stable_tx_id("run-1", "call_abd") != stable_tx_id("run-1", "call_abc")
    with pytest.raises(ValueError):
        stable_tx_id("", "call")


def test_a_transaction_carries_its_task_only_when_named() -> None:
    steps = [ops.charge(100, "usd", "c")]
    assert ops.transaction("t-1", "a", steps, task_id="order-42").body()["task_id"] == "order-42"
    assert "task_id" not in ops.transaction("t-1", "a", steps).body()
