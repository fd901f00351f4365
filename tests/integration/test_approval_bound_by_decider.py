"""Issue 19, items 2 and 3, on the real stack (Kafka, Postgres, the sandbox, every recon
process): the decider, the one writer, binds an approval to the preview its approver was
shown, and the approve route answers by the decider's own rule.

- A command produced straight to `recon.commands`, past the intake, whose steps do not hash
  to its digest (a pinned revision changed under an honest digest), or whose digest is
  forged, or of the old shape that carries no preview, is refused on the chain
  (ApprovalRefused with its reason) and nothing is dispatched: the side door is checked
  like the front door.
- Through the front door the approval is recorded with what was shown: an auditor reading
  the chain recomputes the digest from it, and the call is pinned to the shown revision.
- The route's refusals are the decider's, answered with docs/contract.md's codes and
  nothing recorded: an older preview's digest (`digest_mismatch`), a step that needs no
  approval (`approval_not_required`), a step a person refused (`approval_used`), a
  transaction that failed before its gated step (`not_awaiting_approval`).

One stack for the module (support.stack_fixtures.module_stack): each test has transaction
ids and sandbox records of its own (side-door and rec-side; route, declined and
rec-route), reads only their events, calls and effects, and arms no fault.
"""

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaProducer
from support.recon_client import Recon, effects_for, op
from support.stack_fixtures import module_stack

from events.approval_inputs import ApproveOperation
from events.keys import partition_key
from events.preview import StepPreview, preview_digest
from events.topics import Topics
from services.devtools.stack import Stack

stack = module_stack

OPS = {"Authorization": "Bearer ops-key"}


def delete_tx(tx_id: str, record: str, *, notify: bool = False) -> dict[str, Any]:
    """A gated records.delete with no expected_revision: the approval pins the shown one."""
    body: dict[str, Any] = {
        "tx_id": tx_id,
        "agent_id": "agent-7",
        "steps": [
            {
                "action": "wipe",
                "provider": "sandbox",
                "operation": "records.delete",
                "payload": {"resource": record},
            }
        ],
    }
    if notify:
        body["on_commit"] = [
            {
                "action": "tell",
                "provider": "sandbox",
                "operation": "email.send",
                "payload": {"to": "ops@example.com", "template": "receipt"},
            }
        ]
    return body


async def seed(recon: Recon, record: str, revision: int) -> None:
    seeded = await recon.http.post(
        f"{recon.sandbox_url}/v1/records",
        json={"resource": record, "data": {"n": revision}, "revision": revision},
    )
    assert seeded.status_code == 201, seeded.text


async def waiting(recon: Recon, body: dict[str, Any]) -> dict[str, Any]:
    assert (await recon.submit(body)).status_code == 202
    return await recon.wait_until(
        body["tx_id"],
        lambda t: t["status"] == "awaiting_approval",
        timeout=60,
        failure=f"{body['tx_id']} never waited for approval",
    )


async def preview(recon: Recon, body: dict[str, Any]) -> dict[str, Any]:
    answer = await recon.http.post(
        f"{recon.intake_url}/v1/previews", json=body, headers=recon.headers
    )
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


async def approve(recon: Recon, tx_id: str, digest: str, action: str = "wipe") -> Any:
    return await recon.http.post(
        f"{recon.intake_url}/v1/approvals",
        json={"tx_id": tx_id, "action": action, "digest": digest},
        headers=OPS,
    )


async def produce_raw(stack: Stack, tx_id: str, value: dict[str, Any]) -> None:
    """Past the intake: straight onto recon.commands, keyed like the intake keys it."""
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            Topics(stack.topic_prefix).commands,
            value=json.dumps(value).encode(),
            key=partition_key("demo", tx_id),
        )
    finally:
        await producer.stop()


def side_door(
    tx_id: str, n: int, shown: list[dict[str, Any]], proposal: str, digest: str
) -> dict[str, Any]:
    now = datetime.now(UTC)
    command = ApproveOperation(
        message_id=f"side-door-{tx_id}-{n}",
        tenant="demo",
        tx_id=tx_id,
        action="wipe",
        approval_id=f"ap_side_door_{n}",
        proposal_digest=proposal,
        preview_digest=digest,
        approver="mallory",
        expires_at=now + timedelta(minutes=10),
        issued_at=now,
        shown=tuple(StepPreview.model_validate(s) for s in shown),
    )
    value: dict[str, Any] = json.loads(command.model_dump_json())
    return value


async def refusals(recon: Recon, tx_id: str, count: int) -> list[dict[str, Any]]:
    """The ApprovalRefused events of `tx_id`, once there are `count` of them."""
    deadline = time.monotonic() + 60
    while True:
        found = [e["data"] for e in await recon.events(tx_id) if e["type"] == "ApprovalRefused"]
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{tx_id}: {found} after 60 s"
        await asyncio.sleep(0.2)  # polling the projection, bounded by the deadline


async def test_the_decider_refuses_an_approval_not_bound_to_what_it_carries_whatever_the_door(
    stack: Stack, recon: Recon
) -> None:
    await seed(recon, "rec-side", 1)
    body = delete_tx("side-door", "rec-side")
    tx = await waiting(recon, body)
    key = op(tx, "wipe")["op_key"]
    shown = await preview(recon, body)
    proposal, digest, steps = shown["proposal_digest"], shown["digest"], shown["steps"]
    assert steps[0]["current_revision"] == 1

    # The honest digest, carried with a revision nobody was shown: were it taken on the
    # command's word, the call would be pinned to 7.
    moved = [{**steps[0], "current_revision": 7}]
    await produce_raw(stack, "side-door", side_door("side-door", 1, moved, proposal, digest))
    # A forged digest over honest steps.
    await produce_raw(stack, "side-door", side_door("side-door", 2, steps, proposal, "0" * 64))
    # The old shape: a digest and the intake's word for the revision, no preview.
    v1 = side_door("side-door", 3, steps, proposal, digest)
    v1 = {k: v for k, v in v1.items() if k != "shown"} | {"schema_version": 1, "revision": 7}
    await produce_raw(stack, "side-door", v1)

    refused = await refusals(recon, "side-door", 3)
    assert [(r["approval_id"], r["reason"]) for r in refused] == [
        ("ap_side_door_1", "digest_mismatch"),
        ("ap_side_door_2", "digest_mismatch"),
        ("ap_side_door_3", "preview_not_shown"),
    ]
    after = (await recon.get("side-door")).json()
    assert op(after, "wipe")["state"] == "awaiting_approval"
    types = [e["type"] for e in await recon.events("side-door")]
    assert "OperationApproved" not in types and "OperationDispatched" not in types
    assert await recon.calls(key) == []

    # The front door: recorded with what was shown, which hashes to the digest; the call
    # carries the shown revision.
    approved = await approve(recon, "side-door", digest)
    assert approved.status_code == 201, approved.text
    done = await recon.wait_terminal("side-door", timeout=120)
    assert done["status"] == "committed", done
    events = await recon.events("side-door")
    [event] = [e["data"] for e in events if e["type"] == "OperationApproved"]
    assert event["shown"] == steps and event["revision"] == 1
    recomputed = preview_digest(
        "side-door", event["proposal_digest"], [StepPreview.model_validate(s) for s in steps]
    )
    assert recomputed == event["preview_digest"] == digest
    [effect] = effects_for(await recon.effects("records.delete"), key)
    assert effect["payload"] == {"resource": "rec-side", "expected_revision": 1}


async def test_the_route_answers_by_the_deciders_rule_and_records_nothing(
    stack: Stack, recon: Recon
) -> None:
    await seed(recon, "rec-route", 1)
    body = delete_tx("route", "rec-route", notify=True)
    await waiting(recon, body)
    older = await preview(recon, body)
    # The record moves on and is previewed again: the older digest binds nothing now.
    await seed(recon, "rec-route", 2)
    latest = await preview(recon, body)
    assert latest["digest"] != older["digest"]
    stale = await approve(recon, "route", older["digest"])
    assert (stale.status_code, stale.json()["error"]) == (409, "digest_mismatch"), stale.text
    # The on_commit notification is not a step that waits for approval.
    ungated = await approve(recon, "route", latest["digest"], action="tell")
    assert (ungated.status_code, ungated.json()["error"]) == (409, "approval_not_required")

    # Refused by a person: the step never runs, and an approval of it comes too late.
    key = op((await recon.get("route")).json(), "wipe")["op_key"]
    reject = await recon.http.post(f"{recon.intake_url}/v1/approvals/{key}/reject", headers=OPS)
    assert reject.status_code == 202, reject.text
    failed = await recon.wait_terminal("route", timeout=60)
    assert failed["status"] == "failed", failed
    late = await approve(recon, "route", latest["digest"])
    assert (late.status_code, late.json()["error"]) == (409, "approval_used"), late.text
    # Every refusal was the route's: none of them reached the log.
    types = [e["type"] for e in await recon.events("route")]
    assert "ApprovalRefused" not in types and "OperationApproved" not in types

    # A transaction that failed before its gated step was reached takes no approval.
    declined = delete_tx("declined", "rec-route")
    charge = {
        "action": "charge",
        "provider": "sandbox",
        "operation": "payments.charge",
        "payload": {"amount": 1500, "currency": "usd", "customer": "cus_decline"},
        "compensation": {"operation": "payments.refund"},
    }
    declined["steps"].insert(0, charge)
    submitted = await recon.submit(declined)
    assert submitted.status_code == 202, submitted.text
    ended = await recon.wait_terminal("declined", timeout=60)
    assert (ended["status"], op(ended, "wipe")["state"]) == ("failed", "pending"), ended
    view = await preview(recon, declined)
    closed = await approve(recon, "declined", view["digest"])
    assert (closed.status_code, closed.json()["error"]) == (409, "not_awaiting_approval")
    assert "ApprovalRefused" not in [e["type"] for e in await recon.events("declined")]
