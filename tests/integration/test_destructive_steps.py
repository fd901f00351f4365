"""A destructive step is never sent twice by a machine (events.retry_policy): its unknown is
settled by a lookup that finds the effect, or by a person, never by sending it again. The
provider's count of CALLS for the key (GET /v1/calls), not only of effects, proves it."""

from typing import Any

from support.recon_client import Recon, op

from services.devtools.stack import Stack


def delete_tx(tx_id: str, record: str) -> dict[str, Any]:
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


def trail(operation: dict[str, Any]) -> list[tuple[str, str]]:
    # Approval entries (a destructive step waits for one) carry no provider outcome.
    return [(e["source"], e["outcome"]) for e in operation["evidence"] if "outcome" in e]


async def submit_approved(recon: Recon, body: dict[str, Any]) -> None:
    """Submit, then approve as an operator what the provider previews (destructive steps
    wait for a person: RECON_APPROVAL_REQUIRED)."""
    assert (await recon.submit(body)).status_code == 202
    await recon.wait_until(
        body["tx_id"],
        lambda t: t["status"] == "awaiting_approval",
        timeout=60,
        failure="the delete did not wait for approval",
    )
    preview = await recon.http.post(
        f"{recon.intake_url}/v1/previews", json=body, headers=recon.headers
    )
    assert preview.status_code == 200, preview.text
    approved = await recon.http.post(
        f"{recon.intake_url}/v1/approvals",
        json={"tx_id": body["tx_id"], "action": "wipe", "digest": preview.json()["digest"]},
        headers={"Authorization": "Bearer ops-key"},
    )
    assert approved.status_code == 201, approved.text


async def test_destructive_step_is_sent_once_and_waits_unknown_until_a_lookup_settles_it(
    stack: Stack, recon: Recon
) -> None:
    for record in ("rec-lost", "rec-failed"):
        seeded = await recon.http.post(
            f"{recon.sandbox_url}/v1/records",
            json={"resource": record, "data": {"n": 1}, "revision": 1},
        )
        assert seeded.status_code == 201, seeded.text
    # The first delete is done but its answer is lost, its lookups fail for now and its
    # webhook never comes: only a lookup can settle it.
    await recon.arm("records.delete", "lose_response_after_commit")
    await recon.arm("records.delete", "lookup_unavailable", times=1000)
    await recon.arm("records.delete", "webhook_drop")
    await submit_approved(recon, delete_tx("wipe-lost", "rec-lost"))
    tx = await recon.wait_until(
        "wipe-lost",
        lambda t: ("lookup", "unavailable") in trail(op(t, "wipe")),
        timeout=60,
        failure="the lost delete was never looked up",
    )
    lost = op(tx, "wipe")
    assert lost["state"] == "unknown"
    await recon.assert_applied_once(lost["op_key"])

    # The second delete fails before the provider commits anything (a 500): its lookups
    # then prove the key holds no effect. A write would now be sent again under its key; a
    # delete is not: it stays unknown for the reconciler's lookups, then a person.
    await recon.http.delete(f"{recon.sandbox_url}/v1/faults")
    await recon.arm("records.delete", "error_500_before_commit")
    await submit_approved(recon, delete_tx("wipe-failed", "rec-failed"))
    tx = await recon.wait_until(
        "wipe-failed",
        lambda t: ("lookup", "absent") in trail(op(t, "wipe")),
        timeout=60,
        failure="the failed delete was never proven absent",
    )
    failed = op(tx, "wipe")
    assert failed["state"] == "unknown" and failed["attempts"] == 1
    calls = await recon.calls(failed["op_key"])
    assert [c["outcome"] for c in calls if c["kind"] == "apply"] == ["failed"], calls

    # Lookups answer again: the first delete's effect is found, and that settles it.
    tx = await recon.wait_until(
        "wipe-lost",
        lambda t: t["status"] == "committed",
        timeout=60,
        failure="the lost delete was not confirmed by a lookup",
    )
    assert ("lookup", "succeeded") in trail(op(tx, "wipe"))
    await recon.assert_applied_once(lost["op_key"])
    # And the failed one was still never sent again.
    calls = await recon.calls(failed["op_key"])
    assert [c["outcome"] for c in calls if c["kind"] == "apply"] == ["failed"], calls
    assert op((await recon.get("wipe-failed")).json(), "wipe")["state"] == "unknown"
