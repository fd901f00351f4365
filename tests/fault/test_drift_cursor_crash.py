"""kill -9 of a drift scan (incremental or a backstop) after its findings are produced and
remembered as reported and before its accounts' cursors move: the next scan judges the same
span again, finds the same drift under the same ids, and reports none of it a second time."""

import asyncio
import subprocess
import sys
from collections import Counter

import asyncpg
import pytest
from support.drift_scanner import lose_effects, scanner_settings, scans_by_hand
from support.recon_client import Recon, op, transaction
from support.topic_records import read_topic

from events.topics import Topics
from services.crash_points import CRASH_ENV, CRASH_EXIT_CODE, DRIFT_BEFORE_CURSORS
from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack
from services.pull_reconciler.runtime import open_reconciler


@pytest.mark.parametrize("full", [False, True], ids=["incremental", "backstop"])
async def test_a_scan_killed_before_its_cursor_moves_reports_nothing_twice(
    stack: Stack, recon: Recon, full: bool
) -> None:
    """The backstop too: over a whole listing it moves the cursor, in the same order."""
    await scans_by_hand(stack)  # the scans are this test's
    assert (await recon.submit(transaction("lost-1", receipt=False))).status_code == 202
    tx = await recon.wait_terminal("lost-1")
    assert tx["status"] == "committed"
    lost = op(tx, "charge")["op_key"]
    # The provider loses the charge: intent without effect, which only the scan reports
    # (a stray effect would be reported by the webhook ingress too, under the same id).
    lose_effects(stack, lost)

    scan = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "services.cli", "drift", "--scan", *(["--full"] if full else [])],
        cwd=REPO_ROOT,
        env={**stack.env(), "RECON_DRIFT_GRACE_S": "0.001", CRASH_ENV: DRIFT_BEFORE_CURSORS},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert scan.returncode == CRASH_EXIT_CODE, scan.stderr
    drift_topic = Topics(stack.topic_prefix).drift
    reported = await read_topic(stack.kafka_bootstrap, drift_topic)
    assert [(r["kind"], r["op_key"]) for r in reported] == [("intent_without_effect", lost)]
    conn = await asyncpg.connect(stack.database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM reconciler_drift_reported") == 1
        assert await conn.fetchval("SELECT count(*) FROM reconciler_drift_cursors") == 0

        async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as scanner:
            # The cursor did not move, so the span is judged again and the drift found again...
            found = await scanner.drift_scan(full=full)
        assert [(d.kind.value, d.op_key) for d in found] == [("intent_without_effect", lost)]
        # ... under its id, already reported: nothing is produced a second time.
        again = await read_topic(stack.kafka_bootstrap, drift_topic)
        assert Counter(r["drift_id"] for r in again) == {found[0].drift_id: 1}
        assert await conn.fetchval("SELECT count(*) FROM reconciler_drift_cursors") == 1
    finally:
        await conn.close()
