"""No tenant reaches another tenant's resources (issue 7, acceptance: broken object level
authorization). Two tenants on one stack of real processes; one of them owns a committed
transaction, a transaction under manual review and a drift report; the other names each of
them on every route that takes an id and is answered exactly as for an id that does not
exist, finds none of them in any listing, and changes nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
from aiokafka import AIOKafkaProducer
from support.recon_client import Recon, op, transaction

from events.definition import Leg
from events.drift import DriftDetected, DriftKind, drift_id
from events.inputs import RequestReview
from events.keys import partition_key
from events.topics import Topics
from services.devtools.stack import Stack

T = TypeVar("T")
OWNER = {"Authorization": "Bearer demo-key"}
INTRUDER = {"Authorization": "Bearer other-key"}
INTRUDER_OPS = {"Authorization": "Bearer other-ops-key"}


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await probe()
        if found is not None and found is not False:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


async def produce(stack: Stack, topic: str, key: bytes, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value=value, key=key)
    finally:
        await producer.stop()


async def owned_resources(stack: Stack, recon: Recon) -> dict[str, str]:
    """A committed transaction, one in manual review with its review open, and a drift
    report about one of the owner's operations, all of tenant `demo`."""
    topics = Topics(stack.topic_prefix)
    assert (await recon.submit(transaction("iso-done"))).status_code == 202
    done = await recon.wait_terminal("iso-done")
    assert done["status"] == "committed"

    # A charge whose outcome nothing can learn, then a review of it.
    await recon.arm("payments.charge", "lookup_unavailable", times=1000)
    await recon.arm("payments.charge", "lose_response_after_commit", times=1)
    await recon.arm("payments.charge", "webhook_drop", times=1)
    assert (await recon.submit(transaction("iso-review"))).status_code == 202

    async def charge_unknown() -> bool:
        response = await recon.get("iso-review")
        return response.status_code == 200 and op(response.json(), "charge")["state"] == "unknown"

    await eventually(charge_unknown, "iso-review: charge unknown")
    request = RequestReview(
        message_id="test-review:iso-review",
        tenant="demo",
        tx_id="iso-review",
        action="charge",
        leg=Leg.FORWARD,
        attempt=1,
        reason="lookup_budget_exhausted",
        issued_at=datetime.now(UTC),
    )
    await produce(
        stack,
        topics.commands,
        partition_key("demo", "iso-review"),
        request.model_dump_json().encode(),
    )

    async def review_open() -> str | None:
        response = await recon.http.get(f"{recon.intake_url}/v1/reviews", headers=OWNER)
        found = [r["id"] for r in response.json()["reviews"] if r["tx_id"] == "iso-review"]
        return found[0] if found else None

    review = await eventually(review_open, "iso-review: review open")

    # Drift about the owner's committed charge, as the drift scan reports it.
    charge = op(done, "charge")
    report = DriftDetected(
        drift_id=drift_id(DriftKind.MISMATCH, "sandbox", charge["op_key"]),
        kind=DriftKind.MISMATCH,
        provider="sandbox",
        tenant="demo",
        tx_id="iso-done",
        action="charge",
        op_key=charge["op_key"],
        effect_id=charge["remote_id"],
        detail={"field": "amount", "recon": 1299, "provider": 1399},
        detected_at=datetime.now(UTC).isoformat(),
    )
    await produce(stack, topics.drift, report.drift_id.encode(), report.model_dump_json().encode())

    async def drift_listed() -> bool:
        response = await recon.http.get(f"{recon.intake_url}/v1/drift", headers=OWNER)
        return report.drift_id in {d["id"] for d in response.json()["drift"]}

    await eventually(drift_listed, "the owner's drift listed")
    return {
        "done": "iso-done",
        "review_tx": "iso-review",
        "review": review,
        "drift": report.drift_id,
    }


async def test_another_tenant_cannot_see_or_touch_a_tenants_resources(
    two_tenants: tuple[Stack, Recon],
) -> None:
    stack, recon = two_tenants
    owned = await owned_resources(stack, recon)
    done, review_tx, review = owned["done"], owned["review_tx"], owned["review"]
    resolution = {"resolution": "not_applied", "note": "not mine", "actor": "mallory"}

    async with (
        httpx.AsyncClient(base_url=stack.intake_url, headers=INTRUDER, timeout=30) as intruder,
        httpx.AsyncClient(base_url=stack.intake_url, headers=OWNER, timeout=30) as owner,
    ):
        named: list[tuple[str, str, dict[str, Any] | None]] = [
            ("GET", f"/v1/transactions/{done}", None),
            ("GET", f"/v1/transactions/{done}/events", None),
            ("GET", f"/v1/transactions/{review_tx}", None),
            ("GET", f"/v1/transactions/{review_tx}/events", None),
            ("POST", f"/v1/transactions/{review_tx}/abort", {"reason": "x", "actor": "mallory"}),
            ("POST", f"/v1/transactions/{done}/abort", None),
            ("GET", f"/v1/reviews/{review}", None),
            ("POST", f"/v1/reviews/{review}/resolve", resolution),
        ]
        for method, path, body in named:
            # Resolving takes an operator key: the other tenant's operator is the intruder.
            headers = INTRUDER_OPS if path.endswith("/resolve") else None
            theirs = await intruder.request(method, path, json=body, headers=headers)
            # The owner's answer shows the id exists; the intruder's is a plain 404.
            assert theirs.status_code == 404, (path, theirs.text)
            assert theirs.json()["error"] == "not_found", path
            # Exactly what an id that exists nowhere gets.
            for real in (done, review_tx, review):
                path = path.replace(real, "no-such-id")
            nowhere = await intruder.request(method, path, json=body, headers=headers)
            assert (nowhere.status_code, nowhere.json()["error"]) == (404, "not_found"), path
        for method, path, _ in named:
            if method == "GET":
                assert (await owner.get(path)).status_code == 200, path

        # No listing holds anything of the owner's.
        for params in ({}, {"state": "open"}, {"state": "resolved"}):
            listed = (await intruder.get("/v1/reviews", params=params)).json()["reviews"]
            assert listed == [], params
        drift = (await intruder.get("/v1/drift")).json()["drift"]
        assert owned["drift"] not in {d["id"] for d in drift}
        assert not [d for d in drift if d["tx_id"] in (done, review_tx)]

        # And nothing changed: the review is still open, the transaction not aborted.
        still = (await owner.get(f"/v1/reviews/{review}")).json()
        assert (still["state"], still["resolution"]) == ("open", None)
        events = (await owner.get(f"/v1/transactions/{review_tx}/events")).json()["events"]
        assert not [e for e in events if "Abort" in e["type"]]
        # The owner can still resolve it: the intruder's attempt claimed nothing.
        mine = await owner.post(
            f"/v1/reviews/{review}/resolve",
            json={"resolution": "applied", "note": "seen in the dashboard"},
            headers={"Authorization": "Bearer ops-key"},
        )
        assert mine.status_code == 200, mine.text
