"""A stray effect is reported by two reporters: the webhook ingress when the provider tells
of it, and the drift scan when it judges it past its grace. Both name it by the same id
(events.keys.drift_id) and both produce only what they claimed in
reconciler_drift_reported (reconcilers.store.claiming_reports, the one judge), where both
write their reports, so recon.drift holds the drift once whichever comes first, or when
both come at once. Against the real sandbox (which sends the webhook), intake, Postgres
and Kafka."""

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from support.decider_support import eventually
from support.delivery_rows import until_recorded
from support.drift_scanner import dropped_delivery, scanner_settings, scans_by_hand
from support.recon_client import Recon
from support.topic_records import read_topic

from events.topics import Topics
from services.devtools.stack import Stack
from services.pull_reconciler.runtime import open_reconciler

GRACE = timedelta(seconds=60)


async def test_a_stray_reported_by_its_webhook_is_not_reported_again_by_the_scan(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)  # this test runs the scan itself
    drift_topic = Topics(stack.topic_prefix).drift
    made = await recon.http.post(
        f"{stack.sandbox_url}/v1/effects/unrecorded",
        json={"operation": "payments.charge", "payload": {"amount": 7, "currency": "usd"}},
    )
    assert made.status_code == 200, made.text
    stray: str = made.json()["id"]

    async def webhook_report() -> str | None:
        records = await read_topic(stack.kafka_bootstrap, drift_topic)
        ids = [r["drift_id"] for r in records if r.get("effect_id") == stray]
        return ids[0] if ids else None

    # The webhook comes first: the sandbox sends it as it makes the effect.
    drift_id = await eventually(webhook_report, f"the webhook's drift report of {stray}")
    conn = await asyncpg.connect(stack.database_url)
    try:
        await eventually(
            lambda: conn.fetchval(
                "SELECT kind FROM reconciler_drift_reported WHERE drift_id = $1", drift_id
            ),
            f"{drift_id} remembered as reported",
        )
    finally:
        await conn.close()

    async with open_reconciler(scanner_settings(stack, grace_s=GRACE.total_seconds())) as scanner:
        scanner.clock = lambda: datetime.now(UTC) + 2 * GRACE  # the stray past its grace
        found = await scanner.drift_scan()
    # The scan judges it (the same drift, under the same id) and produces nothing.
    assert [(d.kind.value, d.drift_id) for d in found] == [("effect_without_intent", drift_id)]
    records = await read_topic(stack.kafka_bootstrap, drift_topic)
    assert Counter(r["drift_id"] for r in records) == {drift_id: 1}


async def test_a_webhook_arriving_after_the_scan_reported_its_stray_reports_nothing_again(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)  # this test runs the scan itself
    drift_topic = Topics(stack.topic_prefix).drift
    # The stray's webhook is held back (dropped at its first delivery), so the scan reports
    # it first; the operator's replay below is the late delivery.
    await recon.arm("payments.charge", "webhook_drop")
    made = await recon.http.post(
        f"{stack.sandbox_url}/v1/effects/unrecorded",
        json={"operation": "payments.charge", "payload": {"amount": 9, "currency": "usd"}},
    )
    assert made.status_code == 200, made.text
    stray: str = made.json()["id"]

    async with open_reconciler(scanner_settings(stack, grace_s=GRACE.total_seconds())) as scanner:
        scanner.clock = lambda: datetime.now(UTC) + 2 * GRACE  # the stray past its grace
        found = await scanner.drift_scan()
    [drift_id] = [d.drift_id for d in found if d.effect_id == stray]

    delivery = await dropped_delivery(stack, recon, stray)
    replayed = await recon.http.post(
        f"{stack.sandbox_url}/v1/webhooks/replay/{delivery['event_id']}"
    )
    # The intake answered the late delivery (accepted, remembered: a retry is a duplicate)
    # after Kafka acknowledged anything it produced, so the topic now holds all of it.
    assert replayed.json()["attempt"]["status_code"] == 200, replayed.text
    await until_recorded(stack.database_url, delivery["event_id"])
    records = await read_topic(stack.kafka_bootstrap, drift_topic)
    assert Counter(r["drift_id"] for r in records if r.get("effect_id") == stray) == {drift_id: 1}


class _WebhookDuringProduce:
    """The scan's producer, which delivers the stray's held-back webhook (the sandbox's
    replay, to the real intake) while the scan is producing the stray's drift: after the
    scan judged it unreported and before it is remembered as reported, the same instant
    for both reporters. It then waits until the webhook has been answered, or is waiting
    on the scan's claim in Postgres, and only then lets the scan's record go."""

    def __init__(self, inner: Any, stack: Stack, recon: Recon, stray: str, event: str) -> None:
        self.inner, self.stack, self.recon = inner, stack, recon
        self.stray, self.event = stray, event
        self.replay: asyncio.Task[Any] | None = None

    async def send_and_wait(self, topic: str, value: bytes, key: bytes, **kw: Any) -> Any:
        if self.stray.encode() in value and self.replay is None:
            self.replay = asyncio.create_task(
                self.recon.http.post(f"{self.stack.sandbox_url}/v1/webhooks/replay/{self.event}")
            )
            conn = await asyncpg.connect(self.stack.database_url)
            try:

                async def answered_or_waiting() -> bool:
                    assert self.replay is not None
                    waiting = await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query LIKE '%reconciler_drift_reported%'"
                    )
                    return self.replay.done() or waiting > 0

                await eventually(answered_or_waiting, "the webhook answered or at the claim")
            finally:
                await conn.close()
        return await self.inner.send_and_wait(topic, value=value, key=key, **kw)


async def test_a_scan_and_a_webhook_reporting_one_stray_at_the_same_instant_report_it_once(
    stack: Stack, recon: Recon
) -> None:
    """Until stop 50 each reporter asked whether the id was reported, produced, and then
    remembered it: a webhook handled while the scan was producing found it unreported too,
    and recon.drift held the stray twice. Now each claims the id in the statement that
    records the report, and the second waits at the first's claim."""
    await scans_by_hand(stack)  # this test runs the scan itself
    drift_topic = Topics(stack.topic_prefix).drift
    await recon.arm("payments.charge", "webhook_drop")  # delivered below, mid-scan
    made = await recon.http.post(
        f"{stack.sandbox_url}/v1/effects/unrecorded",
        json={"operation": "payments.charge", "payload": {"amount": 11, "currency": "usd"}},
    )
    assert made.status_code == 200, made.text
    stray: str = made.json()["id"]
    delivery = await dropped_delivery(stack, recon, stray)

    async with open_reconciler(scanner_settings(stack, grace_s=GRACE.total_seconds())) as scanner:
        scanner.clock = lambda: datetime.now(UTC) + 2 * GRACE  # the stray past its grace
        racing = _WebhookDuringProduce(scanner.producer, stack, recon, stray, delivery["event_id"])
        scanner.producer = racing
        found = await scanner.drift_scan()
    assert racing.replay is not None
    replayed = await racing.replay
    assert replayed.json()["attempt"]["status_code"] == 200, replayed.text
    [drift_id] = [d.drift_id for d in found if d.effect_id == stray]
    records = await read_topic(stack.kafka_bootstrap, drift_topic)
    assert Counter(r["drift_id"] for r in records if r.get("effect_id") == stray) == {drift_id: 1}
