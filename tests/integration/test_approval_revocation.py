"""Approvals at the edges of the gate (docs/contract.md, "v1 additions"): an `on_commit`
action is not approvable (409 `approval_not_required`, never a 500), and refusing a gated
step approved ahead (still `pending`, its approval unspent) revokes that approval: the step
is never sent, even once the steps before it succeed."""

import asyncio
import time
from typing import Any

from support.recon_client import Recon, effects_for, op

from services.devtools.stack import Stack
from services.intake.errors import UNSTORABLE_MESSAGE

OPS = {"Authorization": "Bearer ops-key"}


def reserve_then_wipe(tx_id: str, record: str) -> dict[str, Any]:
    return {
        "tx_id": tx_id,
        "agent_id": "agent-7",
        "steps": [
            {
                "action": "reserve",
                "provider": "sandbox",
                "operation": "inventory.reserve",
                "payload": {"sku": "sku-1", "qty": 1},
                "compensation": {"operation": "inventory.release"},
            },
            {
                "action": "wipe",
                "provider": "sandbox",
                "operation": "records.delete",
                "payload": {"resource": record, "expected_revision": 1},
            },
        ],
        "on_commit": [
            {
                "action": "receipt",
                "provider": "sandbox",
                "operation": "email.send",
                "payload": {"to": "a@example.com", "template": "receipt"},
            }
        ],
    }


async def test_refusing_a_step_approved_ahead_revokes_the_approval(
    stack: Stack, recon: Recon
) -> None:
    seeded = await recon.http.post(
        f"{recon.sandbox_url}/v1/records",
        json={"resource": "rec-revoke", "data": {"n": 1}, "revision": 1},
    )
    assert seeded.status_code == 201, seeded.text
    # The reserve hangs, so the wipe stays `pending` while it is approved and refused.
    await recon.arm("inventory.reserve", "delay", delay_ms=8000)
    body = reserve_then_wipe("revoke-1", "rec-revoke")
    assert (await recon.submit(body)).status_code == 202
    tx = await recon.wait_until(
        "revoke-1",
        lambda t: op(t, "reserve")["state"] != "pending",
        timeout=60,
        failure="the reserve was never sent",
    )
    preview = await recon.http.post(
        f"{recon.intake_url}/v1/previews", json=body, headers=recon.headers
    )
    assert preview.status_code == 200, preview.text
    digest = preview.json()["digest"]

    notify = await recon.http.post(
        f"{recon.intake_url}/v1/approvals",
        json={"tx_id": "revoke-1", "action": "receipt", "digest": digest},
        headers=OPS,
    )
    assert notify.status_code == 409, notify.text
    assert notify.json()["error"] == "approval_not_required"

    approved = await recon.http.post(
        f"{recon.intake_url}/v1/approvals",
        json={"tx_id": "revoke-1", "action": "wipe", "digest": digest},
        headers=OPS,
    )
    assert approved.status_code == 201, approved.text
    approval_id = approved.json()["approval_id"]
    # Refused by the approval's id once the decider has recorded the approval; first with
    # a note holding a NUL, which Postgres could never store with its event: refused (422)
    # where the refusal would be taken, and nothing produced (the next one is taken).
    reject = f"{recon.intake_url}/v1/approvals/{approval_id}/reject"
    deadline = time.monotonic() + 60
    while True:
        unstorable = await recon.http.post(reject, json={"note": "\u0000"}, headers=OPS)
        if unstorable.status_code == 422 or time.monotonic() > deadline:
            break
        assert unstorable.status_code in (404, 409), unstorable.text
        await asyncio.sleep(0.2)  # polling the projection, bounded by the deadline
    assert unstorable.json() == {"error": "invalid_request", "message": UNSTORABLE_MESSAGE}
    refused = await recon.http.post(reject, headers=OPS)
    assert refused.status_code == 202, refused.text

    tx = await recon.wait_terminal("revoke-1", timeout=120)
    assert tx["status"] != "committed"
    wipe = op(tx, "wipe")
    assert wipe["state"] == "failed"
    assert effects_for(await recon.effects("records.delete"), wipe["op_key"]) == []
