"""One agent transaction, end to end: real Kafka, Postgres, sandbox and recon processes.

One stack for the module (support.stack_fixtures.module_stack): each test has its own
transaction ids and waits until they are settled, so what one counts before and after a
step of its own (the effects around a conflicting submission) sees no other test's work;
the faults a test arms at the sandbox are disarmed after it; and no test here refunds a
charge, so the declined charge's "no refund at all" holds whatever ran before it."""

import asyncio
from datetime import datetime

import pytest
from support.recon_client import Recon, effects_for, op, transaction
from support.stack_fixtures import module_stack

from events.envelope import Envelope, verify_chain
from events.keys import compensation_key, op_key
from services.config import DEFAULTS
from services.devtools.stack import Stack

stack = module_stack
pytestmark = pytest.mark.usefixtures("disarmed")


async def test_three_steps_commit_with_exactly_one_effect_each(stack: Stack, recon: Recon) -> None:
    accepted = await recon.submit(transaction("order-1"))
    assert accepted.status_code == 202, accepted.text
    assert [o["action"] for o in accepted.json()["operations"]] == ["reserve", "charge", "receipt"]
    tx = await recon.wait_terminal("order-1")
    assert tx["status"] == "committed"
    effects = await recon.effects()
    for action in ("reserve", "charge", "receipt"):
        operation = op(tx, action)
        assert operation["state"] == "confirmed"
        assert len(effects_for(effects, operation["op_key"])) == 1
        await recon.assert_applied_once(operation["op_key"])
        assert operation["remote_id"] == effects_for(effects, operation["op_key"])[0]["id"]
    # Notifications only after commit: the email effect is no older than the commit event.
    events = await recon.events("order-1")
    committed_at = next(e["occurred_at"] for e in events if e["type"] == "TransactionCommitted")
    email = effects_for(effects, op(tx, "receipt")["op_key"])[0]
    assert datetime.fromisoformat(email["created_at"]) >= datetime.fromisoformat(committed_at)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    envelopes = [
        Envelope.model_validate(
            {
                "tenant": "demo",
                "tx_id": "order-1",
                "schema_version": 1,
                "correlation_id": "demo/order-1",
                **e,
            }
        )
        for e in events
    ]
    assert verify_chain(envelopes) == []


async def test_lost_response_after_the_effect_is_confirmed_by_lookup(
    stack: Stack, recon: Recon
) -> None:
    await recon.arm("payments.charge", "lose_response_after_commit")
    # The sandbox's webhook would otherwise confirm the charge first (see
    # test_reviews_and_webhooks_e2e); this test is about the dispatcher's own lookup.
    await recon.arm("payments.charge", "webhook_drop")
    assert (await recon.submit(transaction("lost-1"))).status_code == 202
    tx = await recon.wait_terminal("lost-1")
    assert tx["status"] == "committed"
    charge = op(tx, "charge")
    assert [e["outcome"] for e in charge["evidence"]][:2] == ["unknown", "succeeded"]
    assert charge["evidence"][1]["source"] == "lookup"
    assert len(effects_for(await recon.effects(), charge["op_key"])) == 1
    # The unknown was settled by looking up, never by sending the charge again.
    calls = await recon.assert_applied_once(charge["op_key"])
    assert ("lookup", "found") in [(c["kind"], c["outcome"]) for c in calls]


async def test_500_after_the_effect_is_confirmed_by_lookup(stack: Stack, recon: Recon) -> None:
    await recon.arm("inventory.reserve", "error_500_after_commit")
    await recon.arm("inventory.reserve", "webhook_drop")  # the lookup, not a webhook, settles it
    assert (await recon.submit(transaction("err500-1"))).status_code == 202
    tx = await recon.wait_terminal("err500-1")
    assert tx["status"] == "committed"
    reserve = op(tx, "reserve")
    assert reserve["evidence"][0]["status_code"] == 500
    assert len(effects_for(await recon.effects(), reserve["op_key"])) == 1
    calls = await recon.assert_applied_once(reserve["op_key"])
    assert ("lookup", "found") in [(c["kind"], c["outcome"]) for c in calls]


async def test_declined_charge_fails_with_the_providers_answer_releases_and_no_email(
    stack: Stack, recon: Recon
) -> None:
    assert (await recon.submit(transaction("decline-1", customer="cus_decline"))).status_code == 202
    tx = await recon.wait_terminal("decline-1")
    # The reserve was confirmed before the charge was declined: it is released.
    assert tx["status"] == "compensated"
    charge = op(tx, "charge")
    assert charge["state"] == "failed"
    assert charge["evidence"][-1]["status_code"] == 402
    assert charge["evidence"][-1]["body"]["error"] == "card_declined"
    assert op(tx, "reserve")["state"] == "compensated"
    assert op(tx, "receipt")["state"] == "pending"
    effects = await recon.effects()
    assert effects_for(effects, op(tx, "receipt")["op_key"]) == []
    releases = effects_for(effects, compensation_key(op(tx, "reserve")["op_key"]))
    assert [e["operation"] for e in releases] == ["inventory.release"]
    # The refusal is final: the charge was sent once and never again.
    charge_calls = await recon.calls(charge["op_key"])
    assert [c["outcome"] for c in charge_calls if c["kind"] == "apply"] == ["refused"]
    await recon.assert_applied_once(compensation_key(op(tx, "reserve")["op_key"]))
    assert await recon.effects("payments.refund") == []


async def test_concurrent_identical_submissions_make_one_transaction(
    stack: Stack, recon: Recon
) -> None:
    body = transaction("dup-1")
    answers = await asyncio.gather(*(recon.submit(body) for _ in range(20)))
    assert {a.status_code for a in answers} <= {200, 202}
    assert len({str(a.json()["operations"]) for a in answers}) == 1
    tx = await recon.wait_terminal("dup-1")
    assert tx["status"] == "committed"
    effects = await recon.effects()
    for action in ("reserve", "charge", "receipt"):
        assert len(effects_for(effects, op(tx, action)["op_key"])) == 1
        await recon.assert_applied_once(op(tx, action)["op_key"])
    events_before = await recon.settled_events("dup-1")
    conflict = await recon.submit(transaction("dup-1", customer="cus_other"))
    assert conflict.status_code == 409 and conflict.json()["error"] == "tx_conflict"
    assert len(await recon.effects()) == len(effects)
    assert await recon.events("dup-1") == events_before


async def test_conflicting_body_first_dispatches_nothing_for_the_second(
    stack: Stack, recon: Recon
) -> None:
    assert (await recon.submit(transaction("conf-1"))).status_code == 202
    second = await recon.submit(transaction("conf-1", sku="sku-2"))
    assert second.status_code == 409
    tx = await recon.wait_terminal("conf-1")
    effects = await recon.effects("inventory.reserve")
    assert [e["payload"]["sku"] for e in effects_for(effects, op(tx, "reserve")["op_key"])] == [
        "sku-1"
    ]


async def test_bad_input_and_wrong_key_leave_no_trace(stack: Stack, recon: Recon) -> None:
    bad = transaction("bad-1")
    bad["steps"][0]["operation"] = "payments.teleport"
    refused = await recon.submit(bad)
    assert refused.status_code in (400, 422)
    assert "payments.teleport" in refused.json()["message"]
    wrong_key = Recon(stack.intake_url, stack.sandbox_url, api_key="not-a-key")
    try:
        unauthorized = await wrong_key.submit(transaction("bad-2"))
        assert unauthorized.status_code == 401
    finally:
        await wrong_key.close()
    environment = stack.env().get("RECON_ENVIRONMENT", DEFAULTS["RECON_ENVIRONMENT"])
    keys = {
        op_key(
            tenant="demo",
            environment=environment,
            provider=step["provider"],
            tx_id=tx_id,
            action=step["action"],
        )
        for tx_id in ("bad-1", "bad-2")
        for step in [*bad["steps"], *bad.get("on_commit", [])]
    }
    for tx_id in ("bad-1", "bad-2"):
        assert (await recon.get(tx_id)).status_code == 404
    # The other tests' effects are on the module's sandbox: none under these two's keys
    # (the keys the intake would have issued them, events.keys).
    assert [e for e in await recon.effects() if e["idempotency_key"] in keys] == []
