"""kill -9 of the decider after it committed a dispatch and the provider answered, before the
answer was decided: the decider hosts dispatch (services/decider/dispatch_host.py), so the
answer dies with it. The decider that takes the partition runs every leg still `dispatched`
with no answer through the call plan again; the call's `calls_begun` row says it was begun,
so it is looked up first, and a destructive operation found absent is never sent again."""

from pathlib import Path
from typing import Any

from support.crash_support import start_paused_at, wait_paused
from support.recon_client import Recon, op, transaction

from services.crash_points import DISPATCHER_AFTER_PROVIDER_ANSWERED
from services.devtools.stack import Stack
from services.dispatcher.call_plan import NOT_RESENT

OPS = {"Authorization": "Bearer ops-key"}  # the operator key of the default configuration


async def test_decider_killed_after_the_effect_takes_over_with_a_lookup_first(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    # Held exactly in the window: the dispatch is committed, the provider applied the
    # reserve and answered, and the decider has not decided (nor written) the answer. The pull
    # reconciler is stopped: it would look the stuck leg up too, and hide a missing take-over.
    stack.stop("reconciler")
    marker = tmp_path / "paused"
    start_paused_at(stack, "decider", DISPATCHER_AFTER_PROVIDER_ANSWERED, marker)
    # No webhook: only the decider's take-over can settle the reserve.
    await recon.arm("inventory.reserve", "webhook_drop")
    assert (await recon.submit(transaction("crash-1"), retry_unavailable=True)).status_code == 202
    await wait_paused(stack, "decider", marker)
    stack.kill("decider")
    stack.start("decider")

    tx = await recon.wait_terminal("crash-1", timeout=90)
    assert tx["status"] == "committed"
    # The take-over looked the key up and found the effect: one apply reached the provider,
    # and what came after it were lookups, never a second apply.
    reserve = op(tx, "reserve")["op_key"]
    calls = await recon.assert_applied_once(reserve)
    after = [(c["kind"], c["outcome"]) for c in calls if c["seq"] > _applied(calls)["seq"]]
    assert ("lookup", "found") in after, calls
    # The answer is the take-over's own lookup (a call's observation id, not a reconciler's).
    assert op(tx, "reserve")["evidence"][-1]["observation_id"] == f"{reserve}:1:lookup:succeeded:1"
    for action in ("charge", "receipt"):
        await recon.assert_applied_once(op(tx, action)["op_key"])


async def test_decider_killed_after_a_destructive_call_never_sends_it_again(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    seeded = await recon.http.post(
        f"{recon.sandbox_url}/v1/waitlists",
        json={"resource": "class-0700", "users": ["u1", "u2", "u3"], "revision": 7},
    )
    assert seeded.status_code == 201, seeded.text
    stack.stop("reconciler")  # only the take-over may look the promotion up
    marker = tmp_path / "paused"
    start_paused_at(stack, "decider", DISPATCHER_AFTER_PROVIDER_ANSWERED, marker)
    # The promotion is accepted (202) but shows in lookups only a minute later, and sends no
    # webhook: a take-over's lookup finds it absent although the call was made.
    await recon.arm("waitlist.promote", "pending", delay_ms=60_000)
    await recon.arm("waitlist.promote", "webhook_drop")
    body = _promotion("crash-promote", "u3", 7)
    preview = (
        await recon.http.post(f"{recon.intake_url}/v1/previews", json=body, headers=recon.headers)
    ).json()
    assert (await recon.submit(body, retry_unavailable=True)).status_code == 202
    await recon.wait_until(
        "crash-promote",
        lambda t: t["status"] == "awaiting_approval",
        timeout=60,
        failure="the promotion never waited for approval",
    )
    approved = await recon.http.post(
        f"{recon.intake_url}/v1/approvals",
        json={
            "tx_id": "crash-promote",
            "action": "promote",
            "digest": preview["digest"],
            "expires_in_s": 600,
        },
        headers=OPS,
    )
    assert approved.status_code == 201, approved.text
    await wait_paused(stack, "decider", marker)
    stack.kill("decider")
    stack.start("decider")

    tx = await recon.wait_until(
        "crash-promote",
        lambda t: any(e.get("error") == NOT_RESENT for e in op(t, "promote")["evidence"]),
        timeout=90,
        failure="the take-over never answered the promotion",
    )
    key = op(tx, "promote")["op_key"]
    calls = await recon.calls(key)
    # One call reached the provider; after it, only the take-over's lookup, which found
    # nothing (the promotion is still pending) and did not send it again.
    assert [(c["kind"], c["outcome"]) for c in calls][1:] == [("lookup", "absent")], calls
    assert calls[0]["kind"] == "apply", calls
    assert op(tx, "promote")["state"] == "unknown", tx


def _promotion(tx_id: str, user: str, revision: int) -> dict[str, Any]:
    return {
        "tx_id": tx_id,
        "agent_id": "agent-7",
        "steps": [
            {
                "action": "promote",
                "provider": "sandbox",
                "operation": "waitlist.promote",
                "resource": "class-0700",
                "expected_revision": revision,
                "payload": {"user": user},
                "compensation": {"operation": "waitlist.restore"},
            }
        ],
    }


def _applied(calls: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in calls if c["outcome"] == "applied")
    return found
