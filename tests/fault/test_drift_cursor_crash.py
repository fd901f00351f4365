"""kill -9 of a drift scan (incremental or a backstop) after its findings are produced and
remembered as reported and before its accounts' cursors move: the next scan judges the same
span again, finds the same drift under the same ids, and reports none of it a second time.
A cut scan killed there leaves neither its cursor nor its hole (one transaction): the next
lists the same cut again and writes both, and the walk below the cut finds the rest."""

import asyncio
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from support.drift_scanner import (
    a_charge_that_lost_its_effect,
    cli_scan,
    hole,
    scanner_settings,
    scans_by_hand,
    strays_at,
)
from support.recon_client import Recon
from support.topic_records import read_topic

from events.topics import Topics
from services.crash_points import CRASH_ENV, CRASH_EXIT_CODE, DRIFT_BEFORE_CURSORS
from services.devtools.stack import Stack
from services.pull_reconciler.runtime import open_reconciler


@pytest.mark.parametrize("full", [False, True], ids=["incremental", "backstop"])
async def test_a_scan_killed_before_its_cursor_moves_reports_nothing_twice(
    stack: Stack, recon: Recon, full: bool
) -> None:
    """The backstop too: over a whole listing it moves the cursor, in the same order."""
    await scans_by_hand(stack)  # the scans are this test's
    lost = await a_charge_that_lost_its_effect(stack, recon, "lost-1")

    scan = await cli_scan(stack, *(["--full"] if full else []), **{CRASH_ENV: DRIFT_BEFORE_CURSORS})
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


async def _cli_scan(stack: Stack, **env: str) -> subprocess.CompletedProcess[str]:
    """`drift --scan` with a page cap of one page (100 effects): what an operator's
    RECON_DRIFT_LIST_PAGES does."""
    return await cli_scan(stack, RECON_DRIFT_LIST_PAGES="sandbox=1", **env)


async def test_a_cut_scan_killed_before_its_cursor_and_hole_leaves_both_to_the_next(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)  # the scans are this test's
    lost = await a_charge_that_lost_its_effect(stack, recon, "lost-cut")
    # 150 strays after the charge, a millisecond apart: a listing of one page holds the
    # newest 100, and the charge's leg and the older 50 lie below its cut.
    start = datetime.now(UTC)
    strays = strays_at(stack, [start + timedelta(milliseconds=i) for i in range(150)])
    await asyncio.sleep(0.2)  # the strays past the scans' grace (1 ms) by their clock

    killed = await _cli_scan(stack, **{CRASH_ENV: DRIFT_BEFORE_CURSORS})
    assert killed.returncode == CRASH_EXIT_CODE, killed.stderr
    drift_topic = Topics(stack.topic_prefix).drift
    first = Counter(r["effect_id"] for r in await read_topic(stack.kafka_bootstrap, drift_topic))
    assert set(first) == set(strays[50:]), sorted(set(first) ^ set(strays[50:]))[:3]
    conn = await asyncpg.connect(stack.database_url)
    try:
        # Killed before the cursors' transaction: no cursor, and so no hole either.
        assert await conn.fetchval("SELECT count(*) FROM reconciler_drift_cursors") == 0

        again = await _cli_scan(stack)
        assert again.returncode == 0, again.stderr
        # The same cut listed again, its findings already reported; cursor and hole now.
        assert await conn.fetchval("SELECT count(*) FROM reconciler_drift_cursors") == 1
        assert await hole(stack) is not None

        walked = await _cli_scan(stack)
        assert walked.returncode == 0, walked.stderr
        assert await hole(stack) is None
    finally:
        await conn.close()
    records = await read_topic(stack.kafka_bootstrap, drift_topic)
    # Below the cut: the older strays and the lost charge, found by the walk; each drift
    # once on the topic, though the killed scan's were found twice.
    assert {r["effect_id"] for r in records} >= set(strays)
    assert ("intent_without_effect", lost) in {(r["kind"], r["op_key"]) for r in records}
    assert max(Counter(r["drift_id"] for r in records).values()) == 1
