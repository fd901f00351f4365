"""Quotas with a breaker (issue 11, acceptance: "a quota run-away loop, 200 charges from one
agent in a burst, is stopped at the quota, held for review, zero charges past the limit").

The provider's own call log (`GET /v1/calls`) is the witness: it counts every charge that
reached it, whatever recon believes.
"""

import asyncio
import time
from typing import Any

from support.governance_support import AGENT, OPERATOR, charge, put_policy
from support.recon_client import Recon

BURST = 200
LIMIT = 3
POLICY = {
    "version": 1,
    "agents": {
        "agent-7": {
            "grants": ["payments.charge"],
            "quotas": [
                {
                    "operation": "payments.charge",
                    "window_s": 3600,
                    "max_count": LIMIT,
                    "max_amount": 50_000,
                }
            ],
        }
    },
}


async def charges_applied(recon: Recon) -> list[dict[str, Any]]:
    calls = await recon.calls()
    return [c for c in calls if c["operation"] == "payments.charge" and c["kind"] == "apply"]


async def wait_for_reviews(recon: Recon, count: int, timeout: float = 180) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        reviews = await recon.open_reviews()
        if len(reviews) >= count or time.monotonic() > deadline:
            return reviews
        await asyncio.sleep(0.5)


async def test_a_burst_of_200_charges_is_stopped_at_the_quota_and_held_for_review(
    recon: Recon,
) -> None:
    assert (await put_policy(recon.http, recon.intake_url, POLICY)).status_code == 200

    # The run-away loop: 200 charges from one agent at once.
    gate = asyncio.Semaphore(50)

    async def submit(i: int) -> None:
        async with gate:
            response = await recon.submit(charge(f"burst-{i:03d}"), retry_unavailable=True)
            assert response.status_code == 202, response.text

    await asyncio.gather(*(submit(i) for i in range(BURST)))

    reviews = await wait_for_reviews(recon, BURST - LIMIT)
    assert len(reviews) == BURST - LIMIT, f"{len(reviews)} reviews"
    assert {r["reason"] for r in reviews} == {"quota_exceeded"}
    held = {r["tx_id"] for r in reviews}
    passed = sorted({f"burst-{i:03d}" for i in range(BURST)} - held)
    assert len(passed) == LIMIT
    for tx_id in passed:
        assert (await recon.wait_terminal(tx_id))["status"] == "committed"
    for tx_id in sorted(held)[:5]:
        tx = (await recon.get(tx_id)).json()
        assert tx["status"] == "manual_review"
        assert tx["operations"][0]["state"] == "manual_review"

    # Zero charges past the limit, counted at the provider.
    charges = [
        c
        for c in await recon.calls()
        if c["operation"] == "payments.charge" and c["kind"] == "apply"
    ]
    assert len(charges) == LIMIT, charges

    # The breaker is visible, and open.
    quotas = (await recon.http.get(f"{recon.intake_url}/v1/quotas", headers=AGENT)).json()
    [quota] = quotas["quotas"]
    assert (quota["used_count"], quota["used_amount"]) == (LIMIT, LIMIT * 1299)
    assert quota["breaker"]["state"] == "open"
    assert quota["breaker"]["refused"] == BURST - LIMIT

    # A review `retry` passes through the same gate: the breaker holds it again.
    first = reviews[0]
    resolved = await recon.http.post(
        f"{recon.intake_url}/v1/reviews/{first['id']}/resolve",
        json={"resolution": "retry", "note": "try again", "actor": "ops@example.com"},
        headers=OPERATOR,
    )
    assert resolved.status_code == 200, resolved.text

    async def reviewed_again() -> bool:
        return any(
            r["tx_id"] == first["tx_id"] and r["id"] != first["id"]
            for r in await recon.open_reviews()
        )

    deadline = time.monotonic() + 60
    while not await reviewed_again():
        assert time.monotonic() < deadline, "the retry was not held for review again"
        await asyncio.sleep(0.3)
    charges = [
        c
        for c in await recon.calls()
        if c["operation"] == "payments.charge" and c["kind"] == "apply"
    ]
    assert len(charges) == LIMIT
