"""Webhooks, drift and the manual-review queue through the real processes: the sandbox
delivers signed webhooks to the intake, the decider settles what they prove, people
resolve what nothing else can.

One stack for the module, with two tenants (support.stack_fixtures.module_stack_with,
TWO_TENANTS_ENV): each test has transaction ids of its own and judges only its own
transactions, effects, deliveries and drift; the reviews are the second test's alone (the
pull reconciler, 600 s away, sends nothing to review); the faults are disarmed after each.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
from support.recon_client import Recon, effects_for, op, transaction
from support.review_requests import request_review
from support.settled import settled
from support.stack_fixtures import TWO_TENANTS_ENV, module_stack_with
from support.topic_records import read_topic

from events.topics import Topics
from services.devtools.stack import Stack

stack = module_stack_with(**TWO_TENANTS_ENV)
pytestmark = pytest.mark.usefixtures("disarmed")

T = TypeVar("T")
OTHER = {"Authorization": "Bearer other-key"}
OTHER_OPS = {"Authorization": "Bearer other-ops-key"}
OPS = {"Authorization": "Bearer ops-key"}


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 45) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await probe()
        if found is not None and found is not False:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def evidence_sources(events: list[dict[str, Any]], action: str) -> list[tuple[str, str]]:
    return [
        (e["type"], e["data"]["evidence"]["source"])
        for e in events
        if e["data"].get("action") == action and e["data"].get("evidence")
    ]


async def settled_in(recon: Recon, tx_id: str, *statuses: str) -> dict[str, Any]:
    """The transaction once it reached one of `statuses` with nothing in flight or still to
    be sent (support.settled; a review in progress is `manual_review`, which wait_terminal
    would take for an end)."""
    return await recon.wait_until(
        tx_id,
        lambda tx: settled(tx, statuses),
        45,
        f"{tx_id} does not reach {statuses}",
        poll_s=0.2,
    )


async def where_it_stopped(stack: Stack, recon: Recon, tx_id: str) -> str:
    """For a charge whose lookups' evidence never showed: whether the decider committed it
    to recon.events and what the projection shows, so a failure says which reader stalled
    (CI met this once, stop 60, with nothing in the log tails to tell)."""
    logged = [
        (e["type"], e["data"].get("evidence", {}).get("source"))
        for e in await read_topic(stack.kafka_bootstrap, Topics(stack.topic_prefix).events)
        if e["tx_id"] == tx_id and e["data"].get("action") == "charge"
    ]
    shown = op((await recon.get(tx_id)).json(), "charge")
    projected = [e["source"] for e in shown["evidence"]]
    # At the sandbox: each call under the charge's key, and its effect's webhook deliveries
    # (a delivery the armed webhook_drop did not reach confirms the charge).
    calls = [(c["kind"], c["outcome"]) for c in await recon.calls(shown["op_key"])]
    deliveries = []
    for effect in effects_for(await recon.effects(), shown["op_key"]):
        answer = await recon.http.get(
            f"{recon.sandbox_url}/v1/webhooks/deliveries", params={"effect_id": effect["id"]}
        )
        deliveries += [d["status"] for d in answer.json()["deliveries"]]
    return (
        f"logged {logged}; projected state {shown['state']}, evidence {projected};"
        f" sandbox calls {calls}, webhook deliveries {deliveries}"
    )


def count(events: list[dict[str, Any]], type_: str, action: str) -> int:
    return sum(1 for e in events if e["type"] == type_ and e["data"].get("action") == action)


async def every_fault_taken(recon: Recon) -> None:
    """Until the sandbox has no fault armed: each was taken by the delivery it was for."""

    async def none_armed() -> bool:
        armed: list[Any] = (await recon.http.get(f"{recon.sandbox_url}/v1/faults")).json()["faults"]
        return armed == []

    await eventually(none_armed, "every armed fault taken")


async def test_webhooks_confirm_lost_responses_once_and_report_unintended_effects(
    stack: Stack, recon: Recon
) -> None:
    # A lost response whose lookups all fail: only the provider's webhook can tell.
    await recon.arm("payments.charge", "lookup_unavailable", times=1000)
    await recon.arm("payments.charge", "lose_response_after_commit")
    assert (await recon.submit(transaction("lost-1"))).status_code == 202

    tx = await recon.wait_terminal("lost-1")

    charge = op(tx, "charge")
    assert tx["status"] == "committed"
    assert (charge["state"], charge["attempts"]) == ("confirmed", 1)
    assert len(effects_for(await recon.effects(), charge["op_key"])) == 1
    await recon.assert_applied_once(charge["op_key"])
    events = await recon.events("lost-1")
    assert count(events, "OperationDispatched", "charge") == 1  # no second dispatch
    assert ("OperationConfirmed", "webhook") in evidence_sources(events, "charge")
    await recon.http.delete(f"{recon.sandbox_url}/v1/faults")

    # Deliveries duplicated, then held and released in reverse order: every operation's
    # webhook arrives (twice, or late) and none moves a state twice or backwards. A webhook
    # takes the first fault armed for its operation, so each is armed for its transaction's
    # one delivery and taken before the next is armed: until stop 62 the duplicates were
    # armed five times, and reorder-1's webhooks took the duplicates left, never a reorder.
    await recon.arm("payments.charge", "webhook_duplicate")
    await recon.arm("inventory.reserve", "webhook_duplicate")
    assert (await recon.submit(transaction("dup-1"))).status_code == 202
    await every_fault_taken(recon)
    await recon.arm("payments.charge", "webhook_reorder", times=1, delay_ms=1500)
    await recon.arm("inventory.reserve", "webhook_reorder", times=1, delay_ms=1500)
    assert (await recon.submit(transaction("reorder-1"))).status_code == 202
    await every_fault_taken(recon)

    for tx_id in ("dup-1", "reorder-1"):
        done = await recon.wait_terminal(tx_id)
        assert done["status"] == "committed", done

        async def every_webhook_seen(tx_id: str = tx_id) -> list[dict[str, Any]] | None:
            events = await recon.events(tx_id)
            seen = all(
                any(source == "webhook" for _, source in evidence_sources(events, action))
                for action in ("reserve", "charge", "receipt")
            )
            return events if seen else None

        events = await eventually(every_webhook_seen, f"{tx_id}: a webhook for every operation")
        for action in ("reserve", "charge", "receipt"):
            assert count(events, "OperationConfirmed", action) == 1, (tx_id, action)
            webhooks = [s for _, s in evidence_sources(events, action) if s == "webhook"]
            assert len(webhooks) == 1, (tx_id, action)  # the duplicate was not observed
        final = await recon.get(tx_id)
        assert {o["state"] for o in final.json()["operations"]} == {"confirmed"}
    # Those of this test's effects: another test's dropped deliveries are on the sandbox.
    keys = {
        o["op_key"]
        for t in ("lost-1", "dup-1", "reorder-1")
        for o in (await recon.get(t)).json()["operations"]
    }
    ours = {e["id"] for e in await recon.effects() if e["idempotency_key"] in keys}
    duplicated = await recon.http.get(f"{recon.sandbox_url}/v1/webhooks/deliveries")
    deliveries = [d for d in duplicated.json()["deliveries"] if d["effect_id"] in ours]
    assert {d["effect_id"] for d in deliveries} == ours
    assert all(d["status"] == "delivered" for d in deliveries), deliveries

    # An effect nobody asked recon for: reported as drift, once, to every tenant (redacted;
    # in full to the deployment's admin keys only, README "Drift").
    stray = await recon.http.post(
        f"{recon.sandbox_url}/v1/effects/unrecorded",
        json={"operation": "payments.refund", "payload": {"amount": 500, "currency": "usd"}},
    )
    assert stray.status_code == 200
    effect_id = stray.json()["id"]
    replay = await recon.http.get(
        f"{recon.sandbox_url}/v1/webhooks/deliveries", params={"effect_id": effect_id}
    )
    [delivery] = replay.json()["deliveries"]

    async def drift_listed() -> list[dict[str, Any]] | None:
        response = await recon.http.get(f"{recon.intake_url}/v1/drift", headers=recon.headers)
        found = [d for d in response.json()["drift"] if d["effect_id"] == effect_id]
        return found or None

    reported = await eventually(drift_listed, "the unintended effect listed as drift")
    # The provider sends the same event again: still one report. The intake answers a
    # webhook only once what it produced is in Kafka, so once the replay was answered the
    # drift topic holds everything the replay caused: nothing.
    drift_topic = Topics(stack.topic_prefix).drift

    async def reports_of_the_effect() -> list[dict[str, Any]]:
        reports = await read_topic(stack.kafka_bootstrap, drift_topic)
        return [r for r in reports if effect_id in json.dumps(r)]

    before = await reports_of_the_effect()
    replayed = await recon.http.post(
        f"{recon.sandbox_url}/v1/webhooks/replay/{delivery['event_id']}"
    )
    assert replayed.json()["attempt"]["ok"], replayed.text
    assert await reports_of_the_effect() == before
    assert await drift_listed() == reported
    [drift] = reported
    assert (drift["kind"], drift["provider"], drift["tx_id"]) == (
        "effect_without_intent",
        "sandbox",
        None,
    )
    assert drift["detail"]["redacted"] is True
    assert drift["detail"]["operation"] == "payments.refund"
    # An operator key of the tenant sees it redacted too (this asserted the full detail for
    # operator keys: the leak issue 18, item 13 closes); the admin key sees it in full.
    operator = await recon.http.get(
        f"{recon.intake_url}/v1/drift", headers={"Authorization": "Bearer ops-key"}
    )
    [seen] = [d for d in operator.json()["drift"] if d["effect_id"] == effect_id]
    assert seen["detail"]["redacted"] is True
    admin = await recon.http.get(
        f"{recon.intake_url}/v1/drift", headers={"Authorization": "Bearer admin-key"}
    )
    [full] = [d for d in admin.json()["drift"] if d["effect_id"] == effect_id]
    assert full["detail"]["effect"]["id"] == effect_id


async def test_review_resolutions_move_transactions_on_for_their_tenant_only(
    stack: Stack, recon: Recon
) -> None:
    # Three charges whose outcome nothing can learn: the response is lost, lookups fail
    # and the provider's webhook never comes.
    await recon.arm("payments.charge", "lookup_unavailable", times=1000)
    await recon.arm("payments.charge", "lose_response_after_commit", times=3)
    await recon.arm("payments.charge", "webhook_drop", times=3)
    txs = {"applied": "rv-applied", "not_applied": "rv-not-applied", "retry": "rv-retry"}
    for tx_id in txs.values():
        assert (await recon.submit(transaction(tx_id))).status_code == 202

    review_ids: dict[str, str] = {}
    for resolution, tx_id in txs.items():

        async def charge_unknown(tx_id: str = tx_id) -> bool:
            # Unknown, and the dispatcher's lookups have reported that they could not answer.
            response = await recon.get(tx_id)
            if response.status_code != 200:
                return False
            charge = op(response.json(), "charge")
            lookups = [e for e in charge["evidence"] if e["source"] == "lookup"]
            return charge["state"] == "unknown" and bool(lookups)

        try:
            await eventually(charge_unknown, f"{tx_id}: charge unknown, lookups failed")
        except AssertionError as missed:
            explained = f"{missed}; {await where_it_stopped(stack, recon, tx_id)}"
            raise AssertionError(explained) from None
        await request_review(stack, tx_id)

        async def review_open(tx_id: str = tx_id) -> str | None:
            response = await recon.http.get(
                f"{recon.intake_url}/v1/reviews", params={"state": "open"}, headers=recon.headers
            )
            found = [r for r in response.json()["reviews"] if r["tx_id"] == tx_id]
            return found[0]["id"] if found else None

        review_ids[resolution] = await eventually(review_open, f"{tx_id}: review open")

    detail = await recon.http.get(
        f"{recon.intake_url}/v1/reviews/{review_ids['applied']}", headers=recon.headers
    )
    assert detail.status_code == 200
    body = detail.json()
    assert (body["tx_id"], body["action"], body["state"], body["leg"], body["attempt"]) == (
        "rv-applied",
        "charge",
        "open",
        "forward",
        1,
    )
    assert body["reason"] == "lookup_budget_exhausted"
    sources = [(e["event"], e["source"]) for e in body["evidence"]]
    assert sources[:2] == [("OperationUnknown", "response"), ("EvidenceRecorded", "lookup")]
    assert body["evidence"][1]["outcome"] == "unavailable"
    tx = (await recon.get("rv-applied")).json()
    assert tx["status"] == "manual_review"

    # Another tenant neither sees nor resolves it.
    async with httpx.AsyncClient(base_url=stack.intake_url, headers=OTHER, timeout=30) as other:
        assert (await other.get("/v1/reviews")).json()["reviews"] == []
        assert (await other.get(f"/v1/reviews/{review_ids['applied']}")).status_code == 404
        refused = await other.post(
            f"/v1/reviews/{review_ids['applied']}/resolve",
            json={"resolution": "not_applied", "note": "not mine", "actor": "mallory"},
            headers=OTHER_OPS,
        )
        assert refused.status_code == 404

    # The tenant's own agent key may not settle an unknown (docs/contract.md v1 "Roles").
    agent = await recon.http.post(
        f"{recon.intake_url}/v1/reviews/{review_ids['applied']}/resolve",
        json={"resolution": "applied", "note": "mine"},
        headers=recon.headers,
    )
    assert (agent.status_code, agent.json()["error"]) == (403, "operator_only"), agent.text

    bad = await recon.http.post(
        f"{recon.intake_url}/v1/reviews/{review_ids['applied']}/resolve",
        json={"resolution": "maybe", "note": "", "actor": "ops"},
        headers=OPS,
    )
    assert bad.status_code == 422 and "resolution" in bad.json()["message"]

    async def resolve(resolution: str) -> httpx.Response:
        return await recon.http.post(
            f"{recon.intake_url}/v1/reviews/{review_ids[resolution]}/resolve",
            json={"resolution": resolution, "note": "checked the dashboard", "actor": "ops@x"},
            headers=OPS,
        )

    for resolution in ("applied", "not_applied"):
        response = await resolve(resolution)
        assert response.status_code == 200, response.text
        assert response.json() == {
            "id": review_ids[resolution],
            "state": "resolving",
            "resolution": resolution,
        }
    again = await resolve("applied")
    assert again.status_code == 409 and again.json()["error"] == "review_already_resolved"

    # applied: the charge is confirmed and the transaction commits.
    applied = await settled_in(recon, "rv-applied", "committed")
    assert applied["status"] == "committed"
    assert op(applied, "charge")["state"] == "confirmed"
    # not_applied: the charge failed; the reserve is undone.
    not_applied = await settled_in(recon, "rv-not-applied", "compensating", "compensated")
    assert op(not_applied, "charge")["state"] == "failed"
    assert not_applied["status"] in ("compensating", "compensated")
    # retry: lookups work again, so the retry finds the lost charge and sends nothing new.
    await recon.http.delete(f"{recon.sandbox_url}/v1/faults")
    assert (await resolve("retry")).status_code == 200
    retried = await settled_in(recon, "rv-retry", "committed")
    assert retried["status"] == "committed"
    assert (op(retried, "charge")["state"], op(retried, "charge")["attempts"]) == ("confirmed", 2)
    assert len(effects_for(await recon.effects(), op(retried, "charge")["op_key"])) == 1
    # The retry's second attempt looked the key up first and found the effect: one apply.
    calls = await recon.assert_applied_once(op(retried, "charge")["op_key"])
    assert calls[-1]["kind"] == "lookup" and calls[-1]["outcome"] == "found", calls

    async def all_resolved() -> list[dict[str, Any]] | None:
        response = await recon.http.get(
            f"{recon.intake_url}/v1/reviews",
            params={"state": "resolved"},
            headers=recon.headers,
        )
        found: list[dict[str, Any]] = response.json()["reviews"]
        return found if len(found) == 3 else None

    resolved = await eventually(all_resolved, "three reviews resolved")
    assert {r["id"] for r in resolved} == set(review_ids.values())
    closed = await recon.http.get(
        f"{recon.intake_url}/v1/reviews/{review_ids['not_applied']}", headers=recon.headers
    )
    # The resolver is the operator key's person (ops-key=demo:operator), not the body's actor.
    assert (closed.json()["resolution"], closed.json()["actor"]) == ("not_applied", "operator")
    assert (await resolve("retry")).status_code == 409
    open_now = await recon.http.get(
        f"{recon.intake_url}/v1/reviews", params={"state": "open"}, headers=recon.headers
    )
    assert open_now.json()["reviews"] == []
