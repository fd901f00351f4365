"""A crash between the steps of a drift report (reconcilers.store.claiming_reports: the id
claimed in a transaction left open while Kafka acknowledges the report, then committed;
the webhook ingress records its delivery only after that commit).

- Killed with the report acknowledged and the claim open (`drift.produced_claim_open`, in
  the scan and in the ingress): the claim rolls back, so the next scan, or the provider's
  retry of the webhook, reports it again: twice under one id at worst, never lost.
- The ingress killed once the claim committed and before its delivery is recorded
  (`intake.drift_claimed_unrecorded`): the provider's retry finds the drift reported,
  produces nothing, and is recorded.

Real sandbox (its webhooks, and its replay as the provider's retry), intake, Postgres and
Kafka; each process killed at the point by services.crash_points (an exit like kill -9)."""

import asyncio
from collections import Counter
from typing import Any

import asyncpg
import pytest
from support.crash_support import until_listening
from support.drift_scanner import (
    a_charge_that_lost_its_effect,
    cli_scan,
    held_back_stray,
    scanner_settings,
    scans_by_hand,
)
from support.recon_client import Recon
from support.topic_records import read_topic

from events.topics import Topics
from services.crash_points import (
    CRASH_ENV,
    CRASH_EXIT_CODE,
    DRIFT_PRODUCED_CLAIM_OPEN,
    INTAKE_DRIFT_CLAIMED_UNRECORDED,
)
from services.devtools.stack import Stack
from services.pull_reconciler.runtime import open_reconciler


async def _reported(stack: Stack) -> Counter[str]:
    """How often each drift id is on recon.drift."""
    records = await read_topic(stack.kafka_bootstrap, Topics(stack.topic_prefix).drift)
    return Counter(r["drift_id"] for r in records)


async def _count(stack: Stack, query: str, *args: Any) -> int:
    conn = await asyncpg.connect(stack.database_url)
    try:
        found: int = await conn.fetchval(query, *args)
        return found
    finally:
        await conn.close()


async def test_a_scan_killed_with_its_report_acknowledged_and_its_claim_open_reports_it_again(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)  # the scans are this test's
    lost = await a_charge_that_lost_its_effect(stack, recon, "lost-open")
    scan = await cli_scan(stack, **{CRASH_ENV: DRIFT_PRODUCED_CLAIM_OPEN})
    assert scan.returncode == CRASH_EXIT_CODE, scan.stderr
    [drift_id] = await _reported(stack)  # acknowledged by Kafka before the kill...
    # ... and the claim rolled back with the killed connection.
    assert await _count(stack, "SELECT count(*) FROM reconciler_drift_reported") == 0

    async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as scanner:
        found = await scanner.drift_scan()
        assert [(d.kind.value, d.op_key) for d in found] == [("intent_without_effect", lost)]
        # Not lost: reported again, under the same id; and claimed now, so never a third
        # time.
        assert await _reported(stack) == {drift_id: 2}
        await scanner.drift_scan()
    assert await _reported(stack) == {drift_id: 2}
    assert await _count(stack, "SELECT count(*) FROM reconciler_drift_reported") == 1


@pytest.mark.parametrize(
    ("point", "times"),
    [(DRIFT_PRODUCED_CLAIM_OPEN, 2), (INTAKE_DRIFT_CLAIMED_UNRECORDED, 1)],
    ids=["claim_open", "claimed_unrecorded"],
)
async def test_an_intake_killed_reporting_a_webhooks_drift_leaves_it_to_the_providers_retry(
    stack: Stack, recon: Recon, point: str, times: int
) -> None:
    await scans_by_hand(stack)  # only the webhook reports the stray here
    # Sent to the armed intake by the sandbox's replay, and again, as the provider's retry.
    event = await held_back_stray(stack, recon)
    replay = f"{stack.sandbox_url}/v1/webhooks/replay/{event}"
    delivered = "SELECT count(*) FROM webhook_deliveries WHERE delivery_id = $1"

    stack.stop("intake")
    stack.extra_env[CRASH_ENV] = point
    try:
        stack.start("intake")
        await until_listening(recon)
        killed = await recon.http.post(replay)
        assert not killed.json()["attempt"]["ok"], killed.text
        code = await asyncio.to_thread(stack.processes["intake"].wait, 30)
        assert code == CRASH_EXIT_CODE, stack.log_tail("intake")
    finally:
        del stack.extra_env[CRASH_ENV]
    stack.processes.pop("intake")
    [drift_id] = await _reported(stack)  # acknowledged before the kill
    claimed = await _count(stack, "SELECT count(*) FROM reconciler_drift_reported")
    assert claimed == (0 if point == DRIFT_PRODUCED_CLAIM_OPEN else 1)
    assert await _count(stack, delivered, event) == 0  # unrecorded: the provider retries

    stack.start("intake")
    await stack.wait_ready()
    retried = await recon.http.post(replay)
    assert retried.json()["attempt"]["status_code"] == 200, retried.text
    # Reported again only if the claim had rolled back; never lost; recorded now.
    assert await _reported(stack) == {drift_id: times}
    assert await _count(stack, "SELECT count(*) FROM reconciler_drift_reported") == 1
    assert await _count(stack, delivered, event) == 1
