"""A crash between the steps of a drift report (reconcilers.store.claiming_reports: the id
claimed in a transaction left open while Kafka acknowledges the report, then committed;
the webhook ingress records its delivery only after that commit).

- Killed with the report acknowledged and the claim open (`drift.produced_claim_open`, in
  the scan and in the ingress): the claim rolls back, so the next scan, or the provider's
  retry of the webhook, reports it again: twice under one id at worst, never lost.
- The ingress killed once the claim committed and before its delivery is recorded
  (`intake.drift_claimed_unrecorded`): the provider's retry finds the drift reported,
  produces nothing, and is recorded.

And of any delivery: the ingress killed once it answered 2xx and before a statement recorded
the delivery (`intake.answered_unrecorded`, services.intake.delivery_batches): the provider's
retry is handled again, its observation produced again under the same message id, which a
live transaction takes once and a finished one records as ignored, never as an effect.

Real sandbox (its webhooks, and its replay as the provider's retry), intake, Postgres and
Kafka; each process killed at the point by services.crash_points (an exit like kill -9)."""

import asyncio
from collections import Counter
from typing import Any

import asyncpg
import pytest
from support.crash_support import until_listening
from support.delivery_rows import BY_ID, until_recorded
from support.drift_scanner import (
    a_charge_that_lost_its_effect,
    cli_scan,
    dropped_delivery,
    held_back_stray,
    scanner_settings,
    scans_by_hand,
)
from support.recon_client import Recon, op, transaction
from support.topic_records import read_topic

from events.topics import Topics
from services.crash_points import (
    CRASH_ENV,
    CRASH_EXIT_CODE,
    DRIFT_PRODUCED_CLAIM_OPEN,
    INTAKE_ANSWERED_UNRECORDED,
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


async def _replayed_to_an_intake_killed_at(
    stack: Stack, recon: Recon, point: str, replay: str
) -> dict[str, Any]:
    """The sandbox's attempt at `replay`, sent to an intake armed to crash at `point`, once
    the intake has exited there (the test starts the next one)."""
    stack.stop("intake")
    stack.extra_env[CRASH_ENV] = point
    try:
        stack.start("intake")
        await until_listening(recon)
        sent = await recon.http.post(replay)
        code = await asyncio.to_thread(stack.processes["intake"].wait, 30)
        assert code == CRASH_EXIT_CODE, stack.log_tail("intake")
    finally:
        del stack.extra_env[CRASH_ENV]
    stack.processes.pop("intake")
    attempt: dict[str, Any] = sent.json()["attempt"]
    return attempt


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

    killed = await _replayed_to_an_intake_killed_at(stack, recon, point, replay)
    assert not killed["ok"], killed
    [drift_id] = await _reported(stack)  # acknowledged before the kill
    claimed = await _count(stack, "SELECT count(*) FROM reconciler_drift_reported")
    assert claimed == (0 if point == DRIFT_PRODUCED_CLAIM_OPEN else 1)
    assert await _count(stack, BY_ID, event) == 0  # unrecorded: the provider retries

    stack.start("intake")
    await stack.wait_ready()
    retried = await recon.http.post(replay)
    assert retried.json()["attempt"]["status_code"] == 200, retried.text
    # Reported again only if the claim had rolled back; never lost; recorded now.
    assert await _reported(stack) == {drift_id: times}
    assert await _count(stack, "SELECT count(*) FROM reconciler_drift_reported") == 1
    await until_recorded(stack.database_url, event)


async def test_an_intake_killed_between_answering_a_delivery_and_recording_it_has_the_retry_handled_again_without_a_second_effect(  # noqa: E501
    stack: Stack, recon: Recon
) -> None:
    # A committed charge whose webhook is held back, so the test sends it (the replay) when
    # the intake is armed.
    await recon.arm("payments.charge", "webhook_drop")
    assert (await recon.submit(transaction("rec-crash", receipt=False))).status_code == 202
    tx = await recon.wait_terminal("rec-crash")
    assert tx["status"] == "committed"
    key = op(tx, "charge")["op_key"]
    [effect] = [e for e in await recon.effects("payments.charge") if e["idempotency_key"] == key]
    event = (await dropped_delivery(stack, recon, effect["id"]))["event_id"]
    replay = f"{stack.sandbox_url}/v1/webhooks/replay/{event}"

    answered = await _replayed_to_an_intake_killed_at(
        stack, recon, INTAKE_ANSWERED_UNRECORDED, replay
    )
    # Answered: the crash came after, at the statement that was to record it.
    assert answered["status_code"] == 200, answered
    assert await _count(stack, BY_ID, event) == 0

    stack.start("intake")
    await stack.wait_ready()
    retried = await recon.http.post(replay)
    assert retried.json()["attempt"]["status_code"] == 200, retried.text
    await until_recorded(stack.database_url, event)
    message_id = f"webhook:sandbox:{event}"
    observations = await read_topic(stack.kafka_bootstrap, Topics(stack.topic_prefix).observations)
    # Handled twice, produced twice under one message id; the transaction had finished,
    # and a finished transaction's marker keeps no input ids (transactions.finished): each
    # is recorded as ignored, nothing is applied again, the transaction stays as it was.
    assert [o["message_id"] for o in observations].count(message_id) == 2
    events = await recon.settled_events("rec-crash")
    cited = [e["type"] for e in events if _observation(e) == message_id]
    assert cited == ["ObservationIgnored", "ObservationIgnored"], cited
    await recon.assert_applied_once(key)
    assert (await recon.get("rec-crash")).json()["status"] == "committed"


def _observation(event: dict[str, Any]) -> str | None:
    evidence = event["data"].get("evidence")
    return evidence.get("observation_id") if isinstance(evidence, dict) else None
