"""The drift claim's bound (reconcilers.store.CLAIM_IDLE_BOUND_S, 60 s, through
projections.held_open) against a really frozen intake: SIGSTOP on a real intake holding a
drift claim, its connection to Postgres open. The drift scan reporting the same stray waits
at the claim until Postgres ends the frozen intake's session after the bound, then reports
it; the intake, thawed, finds its connection closed.

The broker is paused (SIGSTOP) while the intake handles the stray's webhook, so that the
intake is inside its claim, waiting for Kafka's acknowledgement, when it is frozen; the
broker is resumed at once after. Real sandbox, intake, Postgres and Kafka; the wait is the
real 60 s, since the bound is not a setting (tests/integration/test_drift_claim_holder_lost.py
tries it with 1 s on a silent connection)."""

import asyncio
import os
import signal
import time

import asyncpg
from support.crash_support import wait_for_log
from support.drift_scanner import held_back_stray, scanner_settings, scans_by_hand
from support.recon_client import Recon

from reconcilers.store import CLAIM_IDLE_BOUND_S
from services.devtools.infra.kafka import KafkaBroker
from services.devtools.stack import Stack
from services.pull_reconciler.runtime import open_reconciler

# The intake's claim, idle in its transaction while it waits for Kafka.
HOLDER = (
    "SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction'"
    " AND query LIKE 'INSERT INTO reconciler_drift_reported%'"
)


async def test_a_frozen_intakes_drift_claim_is_let_go_after_its_bound(
    stack: Stack, recon: Recon, kafka_broker: KafkaBroker
) -> None:
    await scans_by_hand(stack)
    event = await held_back_stray(stack, recon)
    assert kafka_broker._proc is not None
    broker, intake = kafka_broker._proc.pid, stack.processes["intake"].pid
    conn = await asyncpg.connect(stack.database_url)
    replay = None
    try:
        os.kill(broker, signal.SIGSTOP)
        try:
            # The sandbox sends the webhook again: the intake claims the stray's drift and
            # waits for the broker (its produce gives up after 10 s: freeze it before).
            replay = asyncio.create_task(
                recon.http.post(f"{stack.sandbox_url}/v1/webhooks/replay/{event}", timeout=300)
            )
            deadline = time.monotonic() + 8
            while (holder := await conn.fetchval(HOLDER)) is None:
                assert time.monotonic() < deadline, "the intake never held the claim"
                await asyncio.sleep(0.05)
            os.kill(intake, signal.SIGSTOP)
            frozen_at = time.monotonic()
        finally:
            os.kill(broker, signal.SIGCONT)
        # It waits at the frozen intake's claim until Postgres ends that session.
        async with (
            open_reconciler(scanner_settings(stack, grace_s=0.001)) as scanner,
            asyncio.timeout(CLAIM_IDLE_BOUND_S + 15),
        ):
            found = await scanner.drift_scan()
        waited = time.monotonic() - frozen_at
        print(f"\nthe scan reported {[d.kind.value for d in found]} {waited:.1f} s after")
        assert waited > CLAIM_IDLE_BOUND_S - 5
        assert [d.kind.value for d in found] == ["effect_without_intent"]
        assert await conn.fetchval("SELECT count(*) FROM reconciler_drift_reported") == 1
        ended = "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $1"
        assert await conn.fetchval(ended, holder)
    finally:
        os.kill(intake, signal.SIGCONT)
        await conn.close()
        if replay is not None:
            await replay
    # Thawed, the intake finds its claim's connection closed by Postgres.
    await wait_for_log(stack, "intake", "terminating connection due to idle-in-transaction timeout")
