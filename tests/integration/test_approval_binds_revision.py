"""An approval holds for the provider state it was shown (issue 18, item 10), through
docs/contract.md's own flow: a gated step that names no `expected_revision` is previewed,
approved (`201`), and its call carries the revision the approval was given at. A record
changed at the provider between the approval and the call is then refused by the provider
(`stale_revision`): nothing is deleted, and the step ends failed for that reason. Unchanged,
the approved delete is applied once."""

import asyncio
import time
from pathlib import Path
from typing import Any

from support.crash_support import start_paused_at, wait_paused
from support.recon_client import Recon, effects_for, op

from services.crash_points import DISPATCHER_BEFORE_CALL_BEGUN
from services.devtools.stack import Stack

OPS = {"Authorization": "Bearer ops-key"}


def delete_tx(tx_id: str, record: str) -> dict[str, Any]:
    # No expected_revision: the agent did not plan against a revision.
    return {
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


async def seed(recon: Recon, record: str, revision: int, data: dict[str, Any]) -> None:
    seeded = await recon.http.post(
        f"{recon.sandbox_url}/v1/records",
        json={"resource": record, "data": data, "revision": revision},
    )
    assert seeded.status_code == 201, seeded.text


async def record(recon: Recon, name: str) -> dict[str, Any]:
    found = await recon.http.get(f"{recon.sandbox_url}/v1/records/{name}")
    assert found.status_code == 200, found.text
    body: dict[str, Any] = found.json()
    return body


async def submit_waiting(recon: Recon, body: dict[str, Any]) -> None:
    assert (await recon.submit(body)).status_code == 202
    await recon.wait_until(
        body["tx_id"],
        lambda t: t["status"] == "awaiting_approval",
        timeout=60,
        failure="the delete did not wait for approval",
    )


async def approve_as_previewed(recon: Recon, body: dict[str, Any]) -> None:
    preview = await recon.http.post(
        f"{recon.intake_url}/v1/previews", json=body, headers=recon.headers
    )
    assert preview.status_code == 200, preview.text
    [shown] = preview.json()["steps"]
    assert shown["current_revision"] == 1, shown
    approved = await recon.http.post(
        f"{recon.intake_url}/v1/approvals",
        json={"tx_id": body["tx_id"], "action": "wipe", "digest": preview.json()["digest"]},
        headers=OPS,
    )
    assert approved.status_code == 201, approved.text


async def wait_dispatched(recon: Recon, tx_id: str, timeout: float = 60) -> None:
    """Until the decider has decided the call (its OperationDispatched is on the log)."""
    deadline = time.monotonic() + timeout
    while True:
        types = [e["type"] for e in await recon.events(tx_id)]
        if "OperationDispatched" in types:
            return
        assert time.monotonic() < deadline, f"{tx_id}: the approved call was never decided"
        await asyncio.sleep(0.2)  # polling the projection, bounded by the deadline


async def test_an_approved_call_is_refused_once_the_record_moved_on_and_applied_once_if_not(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    # Unchanged since the approval: applied once, and the call carried the approved revision.
    await seed(recon, "rec-kept", 1, {"n": 1})
    kept = delete_tx("pin-kept", "rec-kept")
    await submit_waiting(recon, kept)
    await approve_as_previewed(recon, kept)
    tx = await recon.wait_terminal("pin-kept", timeout=120)
    assert tx["status"] == "committed", tx
    key = op(tx, "wipe")["op_key"]
    await recon.assert_applied_once(key)
    [effect] = effects_for(await recon.effects("records.delete"), key)
    assert effect["payload"] == {"resource": "rec-kept", "expected_revision": 1}
    assert (await record(recon, "rec-kept"))["deleted"] is True
    # The durable record says why the call's payload is not the approved one.
    trail = await recon.http.get(f"{recon.intake_url}/v1/operations/{key}", headers=OPS)
    assert trail.status_code == 200, trail.text
    assert trail.json()["approved"]["payload"] == {"resource": "rec-kept"}
    [dispatch] = trail.json()["dispatches"]
    assert dispatch["pinned_revision"] == 1
    assert [
        a["revision"] for a in trail.json()["approvals"] if a["type"] == "OperationApproved"
    ] == [1]

    # Changed after the approval, before the call: the decider, which makes the call, is
    # held right before it while the record moves on to revision 2, so the call is made only
    # after the change.
    await seed(recon, "rec-moved", 1, {"n": 1})
    moved = delete_tx("pin-moved", "rec-moved")
    await submit_waiting(recon, moved)
    marker = tmp_path / "paused"
    start_paused_at(stack, "decider", DISPATCHER_BEFORE_CALL_BEGUN, marker)
    await approve_as_previewed(recon, moved)
    await wait_paused(stack, "decider", marker)
    await seed(recon, "rec-moved", 2, {"n": 2})
    await wait_dispatched(recon, "pin-moved")
    key = op((await recon.get("pin-moved")).json(), "wipe")["op_key"]
    assert await recon.calls(key) == []  # not called before the change
    marker.unlink()  # the decider goes on to the call

    tx = await recon.wait_terminal("pin-moved", timeout=120)
    assert tx["status"] == "failed", tx
    wipe = op(tx, "wipe")
    assert (wipe["state"], wipe["reason"]) == ("failed", "stale_revision"), wipe
    # The provider was asked once, refused it, and applied nothing under the key.
    calls = await recon.calls(key)
    assert [c["outcome"] for c in calls if c["kind"] == "apply"] == ["refused"], calls
    assert effects_for(await recon.effects("records.delete"), key) == []
    after = await record(recon, "rec-moved")
    assert (after["deleted"], after["revision"], after["data"]) == (False, 2, {"n": 2})
