"""Saga compensation, abort and notifications, end to end: real Kafka, Postgres, sandbox
and recon processes (the saga orchestrator included).

One stack for the module (support.stack_fixtures.module_stack): each test has its own
transaction ids and waits until they are settled, so what a test counts over the whole
sandbox it counts over the effects made since it started (`made_here`); the faults a test
arms are disarmed after it."""

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest
from support.compensation_support import compensation_op_key, failing_third_step, time_of, wait_for
from support.recon_client import Recon, effects_for, op, transaction
from support.stack_fixtures import module_stack

from services.devtools.stack import Stack

stack = module_stack
pytestmark = pytest.mark.usefixtures("disarmed")

Effects = Callable[[], Awaitable[list[dict[str, Any]]]]


@pytest.fixture
async def made_here(recon: Recon) -> Effects:
    """The sandbox's effects made since the test started: the earlier tests' are settled
    by then (each waits until its transactions are)."""
    before = {e["id"] for e in await recon.effects()}

    async def made() -> list[dict[str, Any]]:
        return [e for e in await recon.effects() if e["id"] not in before]

    return made


async def test_failed_step_is_undone_in_reverse_order_once_and_only_then_notified(
    stack: Stack, recon: Recon, made_here: Effects
) -> None:
    # The irreversible-step rule: an email step with a fallible step after it is refused
    # before anything is recorded.
    bad = transaction("irreversible-1")
    bad["steps"].insert(
        0,
        {
            "action": "announce",
            "provider": "sandbox",
            "operation": "email.send",
            "payload": {"to": "a@example.com", "template": "on-its-way"},
        },
    )
    refused = await recon.submit(bad)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"] == "irreversible_step_not_last"
    message = refused.json()["message"]
    assert "'announce'" in message and "on_commit" in message and "'charge'" in message
    assert (await recon.get("irreversible-1")).status_code == 404

    accepted = await recon.submit(failing_third_step("undo-1"))
    assert accepted.status_code == 202, accepted.text
    assert [o["action"] for o in accepted.json()["operations"]] == [
        "reserve",
        "charge",
        "deposit",
        "receipt",
        "apology",
    ]
    tx = await recon.wait_terminal("undo-1")
    assert tx["status"] == "compensated", tx
    assert tx["compensation_plan"] == ["charge", "reserve"]
    states = {o["action"]: o["state"] for o in tx["operations"]}
    assert states == {
        "reserve": "compensated",
        "charge": "compensated",
        "deposit": "failed",
        "receipt": "pending",
        "apology": "confirmed",
    }
    assert op(tx, "deposit")["evidence"][-1]["status_code"] == 402

    effects = await made_here()
    refunds = effects_for(effects, compensation_op_key(tx, "charge"))
    releases = effects_for(effects, compensation_op_key(tx, "reserve"))
    assert len(refunds) == len(releases) == 1
    for action in ("charge", "reserve"):
        await recon.assert_applied_once(compensation_op_key(tx, action))
    assert refunds[0]["operation"] == "payments.refund"
    assert releases[0]["operation"] == "inventory.release"
    # Reverse order: the refund (of the later step) is done before the release starts.
    assert refunds[0]["created_at"] < releases[0]["created_at"]
    # Nothing else was undone, and no effect at all exists for the refused plan.
    assert len([e for e in effects if e["operation"] == "payments.refund"]) == 1
    # No receipt for a transaction that never committed; the apology only after it was
    # compensated.
    emails = [e for e in effects if e["operation"] == "email.send"]
    assert [e["idempotency_key"] for e in emails] == [op(tx, "apology")["op_key"]]
    events = await recon.events("undo-1")
    types = [e["type"] for e in events]
    assert "TransactionCommitted" not in types
    assert types.count("CompensationPlanned") == 1
    assert datetime.fromisoformat(emails[0]["created_at"]) >= time_of(
        events, "TransactionCompensated"
    )


async def test_lost_undo_responses_are_resolved_by_lookup_not_sent_again(
    stack: Stack, recon: Recon, made_here: Effects
) -> None:
    await recon.arm("payments.refund", "lose_response_after_commit")
    await recon.arm("inventory.release", "lose_response_after_commit")
    body = failing_third_step("undo-lost-1")
    del body["on_compensated"]
    assert (await recon.submit(body)).status_code == 202
    tx = await recon.wait_terminal("undo-lost-1")
    assert tx["status"] == "compensated", tx
    effects = await made_here()
    assert len(effects_for(effects, compensation_op_key(tx, "charge"))) == 1
    assert len(effects_for(effects, compensation_op_key(tx, "reserve"))) == 1
    assert [e for e in effects if e["operation"] == "email.send"] == []
    for action in ("charge", "reserve"):
        # The lost answer was settled by a lookup or a webhook, never by a second send.
        await recon.assert_applied_once(compensation_op_key(tx, action))
    for action in ("charge", "reserve"):
        operation = op(tx, action)
        assert operation["state"] == "compensated"
        # The undo's answer was lost: a lookup or the provider's webhook proved it, and
        # it was dispatched once, never sent again under a new attempt.
        proofs = [
            e["source"] for e in operation["evidence"] if e["event"] == "OperationCompensated"
        ]
        assert proofs in (["lookup"], ["webhook"]), operation["evidence"]
    undos = [
        e["data"]
        for e in await recon.events("undo-lost-1")
        if e["type"] == "OperationDispatched" and e["data"]["leg"] == "compensation"
    ]
    assert [(u["action"], u["attempt"]) for u in undos] == [("charge", 1), ("reserve", 1)]


async def test_abort_before_commit_during_compensation_and_after_commit(
    stack: Stack, recon: Recon
) -> None:
    # After commit: 409, and the receipt went out only after the commit.
    assert (await recon.submit(transaction("abort-late"))).status_code == 202
    committed = await recon.wait_terminal("abort-late")
    assert committed["status"] == "committed"
    late = await recon.abort("abort-late", {"reason": "too late", "actor": "ops@example.com"})
    assert late.status_code == 409 and late.json()["error"] == "already_committed", late.text
    receipt = effects_for(await recon.effects(), op(committed, "receipt")["op_key"])
    assert len(receipt) == 1
    events = await recon.events("abort-late")
    assert datetime.fromisoformat(receipt[0]["created_at"]) >= time_of(
        events, "TransactionCommitted"
    )
    assert (await recon.abort("no-such-tx")).status_code == 404

    # Before commit: the charge is in flight when the abort arrives; it settles, then it
    # is refunded and the reserve released. No receipt.
    await recon.arm("payments.charge", "delay", delay_ms=1500)
    assert (await recon.submit(transaction("abort-1"))).status_code == 202
    await wait_for(recon, "abort-1", lambda tx: op(tx, "charge")["state"] == "dispatched")
    aborted = await recon.abort("abort-1")
    assert aborted.status_code == 202, aborted.text
    assert aborted.json() == {"tx_id": "abort-1", "status": "abort_requested"}
    tx = await recon.wait_terminal("abort-1")
    assert tx["status"] == "compensated", tx
    assert tx["compensation_plan"] == ["charge", "reserve"]
    effects = await recon.effects()
    assert len(effects_for(effects, op(tx, "charge")["op_key"])) == 1
    assert len(effects_for(effects, compensation_op_key(tx, "charge"))) == 1
    assert len(effects_for(effects, compensation_op_key(tx, "reserve"))) == 1
    assert effects_for(effects, op(tx, "receipt")["op_key"]) == []
    for key in (
        op(tx, "charge")["op_key"],
        compensation_op_key(tx, "charge"),
        compensation_op_key(tx, "reserve"),
    ):
        await recon.assert_applied_once(key)
    types = [e["type"] for e in await recon.events("abort-1")]
    assert types.index("TransactionAbortRequested") < types.index("OperationConfirmed", 3)
    assert "TransactionCommitted" not in types

    # During compensation: 202, the decider records the abort as ignored, nothing changes.
    await recon.arm("inventory.release", "delay", delay_ms=1500)
    assert (await recon.submit(transaction("abort-2", customer="cus_decline"))).status_code == 202
    await wait_for(recon, "abort-2", lambda tx: op(tx, "reserve")["state"] == "compensating")
    during = await recon.abort("abort-2")
    assert during.status_code == 202, during.text
    tx = await recon.wait_terminal("abort-2")
    assert tx["status"] == "compensated", tx
    assert len(effects_for(await recon.effects(), compensation_op_key(tx, "reserve"))) == 1
    await recon.assert_applied_once(compensation_op_key(tx, "reserve"))
    events = await recon.events("abort-2")
    ignored = [e for e in events if e["type"] == "CommandIgnored"]
    assert [(e["data"]["command"], e["data"]["reason"]) for e in ignored] == [
        ("AbortTransaction", "transaction_compensating")
    ]
    assert "TransactionAbortRequested" not in [e["type"] for e in events]
