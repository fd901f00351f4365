"""The incremental drift scan against the real sandbox and Postgres: each account's cursor
(`reconciler_drift_cursors`, reconcilers.drift_span) makes a scan ask the provider from the
cursor less the grace only, judge each effect and each leg once past its grace, and move
on only over a whole listing, so what a cut listing could not cover is judged later.

One stack for the module (support.stack_fixtures.module_stack): each test's scans start
from a fresh deployment's cursors (scans_by_hand), and each leaves the sandbox as
consistent with recon as it found it (its history and strays forgotten, its lost charges
held again, under transaction ids of its own), so the next test's scans over the whole
window find only what that test made."""

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import asyncpg
from support.drift_scanner import (
    asked,
    charges_lost_for_the_test,
    cursor,
    forget_effects,
    history_id,
    old_history,
    sandbox_of,
    scanner_settings,
    scans_by_hand,
)
from support.recon_client import Recon
from support.stack_fixtures import module_stack

from reconcilers import store
from services.devtools.stack import Stack
from services.metrics import DRIFT_LISTINGS
from services.providers.adapters import SandboxAdapter
from services.pull_reconciler.runtime import open_reconciler

stack = module_stack

# In the window, three pages of 100: what the first scan of the account pages through.
IN_WINDOW = 250


async def test_a_second_scan_asks_the_provider_from_its_cursor_less_the_grace(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)  # this test runs the scans itself
    old_history(stack, IN_WINDOW, ago=timedelta(minutes=30))
    try:
        await _asks_from_its_cursor(stack)
    finally:
        forget_effects(stack, [history_id(i) for i in range(IN_WINDOW)])


async def _asks_from_its_cursor(stack: Stack) -> None:
    grace = timedelta(seconds=1)
    async with open_reconciler(scanner_settings(stack, grace_s=grace.total_seconds())) as scanner:
        sandbox = asked(scanner)
        first = await scanner.drift_scan()
        assert len(first) == IN_WINDOW  # every one of them without intent
        # The first scan of the account reads its window: three pages from a day back.
        assert len(sandbox.params) == 3, sandbox.params
        since = datetime.fromisoformat(sandbox.params[0]["created_gte"])
        assert abs(since - (datetime.now(UTC) - timedelta(days=1))) < timedelta(minutes=1)
        judged_to = await cursor(stack)
        assert judged_to is not None

        sandbox.params.clear()
        assert await scanner.drift_scan() == []
        # The second asks from its cursor less the grace: one page, none of the 250.
        assert len(sandbox.params) == 1, sandbox.params
        assert datetime.fromisoformat(sandbox.params[0]["created_gte"]) == judged_to - grace
        later = await cursor(stack)
        assert later is not None and later > judged_to


async def test_an_effect_without_intent_is_found_by_the_next_scan_once(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)
    grace = timedelta(seconds=60)

    async def stray() -> str:
        made = await recon.http.post(
            f"{stack.sandbox_url}/v1/effects/unrecorded",
            json={"operation": "payments.charge", "payload": {"amount": 9, "currency": "usd"}},
        )
        assert made.status_code == 200, made.text
        effect_id: str = made.json()["id"]
        return effect_id

    made: list[str] = []
    async with open_reconciler(scanner_settings(stack, grace_s=grace.total_seconds())) as scanner:
        try:
            # The scans' clock is set, not waited for: each scan a grace and more after the
            # last.
            start = datetime.now(UTC)
            early = await stray()  # made before the first scan, within its grace: not judged
            made.append(early)
            scanner.clock = lambda: start + timedelta(seconds=1)
            assert await scanner.drift_scan() == []
            late = await stray()  # made after the first scan
            made.append(late)
            scanner.clock = lambda: start + 2 * grace
            found = await scanner.drift_scan()
            assert sorted(d.effect_id or "" for d in found) == sorted([early, late])
            assert {d.kind.value for d in found} == {"effect_without_intent"}
            # Judged once: the next scan's span starts after both.
            scanner.clock = lambda: start + 4 * grace
            assert await scanner.drift_scan() == []
        finally:
            forget_effects(stack, made)


async def test_a_cut_listing_leaves_the_cursor_and_a_later_whole_one_judges_what_it_missed(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)
    async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as scanner:
        assert await scanner.drift_scan() == []  # whole (nothing yet): the cursor is set
        before = await cursor(stack)
        assert before is not None

        async with charges_lost_for_the_test(stack, recon, "-cut") as charges:
            # One page of two: the new reserve and the middle charge are listed, the cut covers
            # from the latter on. The new charge is proven missing; the old one is not judged.
            # An adapter that cannot list below an instant (tests/integration/test_drift_hole.py
            # has one that can: its cursor moves on and the cut's rest is kept as a hole).
            sandbox = sandbox_of(scanner)
            sandbox.max_list_pages, sandbox.list_page = 1, 2
            sandbox.lists_until = False
            cut = DRIFT_LISTINGS.labels("sandbox", "cut")._value.get()
            found = await scanner.drift_scan()
            assert DRIFT_LISTINGS.labels("sandbox", "cut")._value.get() == cut + 1
            assert [(d.kind.value, d.op_key) for d in found] == [
                ("intent_without_effect", charges["new"])
            ]
            assert await cursor(stack) == before

            # Whole again: the span is still the cut scan's and more, so the old charge is judged.
            sandbox.max_list_pages = SandboxAdapter.max_list_pages
            sandbox.list_page = SandboxAdapter.list_page
            found = await scanner.drift_scan()
            assert sorted((d.kind.value, d.op_key) for d in found) == sorted(
                [
                    ("intent_without_effect", charges["old"]),
                    ("intent_without_effect", charges["new"]),
                ]
            )
            after = await cursor(stack)
            assert after is not None and before is not None and after > before


async def test_an_unavailable_listing_leaves_the_cursor_and_the_next_scan_judges_its_span(
    stack: Stack, recon: Recon, free_port: Callable[[], int]
) -> None:
    await scans_by_hand(stack)
    async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as scanner:
        assert await scanner.drift_scan() == []
        before = await cursor(stack)
        async with charges_lost_for_the_test(stack, recon, "-unavailable") as charges:
            sandbox = sandbox_of(scanner)
            url, sandbox.base_url = sandbox.base_url, f"http://127.0.0.1:{free_port()}"  # nobody
            unavailable = DRIFT_LISTINGS.labels("sandbox", "unavailable")._value.get()
            assert await scanner.drift_scan() == []
            assert DRIFT_LISTINGS.labels("sandbox", "unavailable")._value.get() == unavailable + 1
            assert await cursor(stack) == before

            sandbox.base_url = url
            found = await scanner.drift_scan()
            assert sorted((d.kind.value, d.op_key) for d in found) == sorted(
                [
                    ("intent_without_effect", charges["old"]),
                    ("intent_without_effect", charges["new"]),
                ]
            )


async def test_a_cursor_moves_forward_only(fresh_database: str) -> None:
    """Two scans at once (two reconcilers, or the CLI's beside the process's): the one that
    writes last may hold the earlier cursor; the later one stays."""
    conn = await asyncpg.connect(fresh_database)
    try:
        later, earlier = datetime.now(UTC), datetime.now(UTC) - timedelta(minutes=1)
        shared, own = ("sandbox", None), ("sandbox", "acme")
        await store.advance_drift_cursors(conn, [(shared, later), (own, earlier)], later)
        await store.advance_drift_cursors(conn, [(shared, earlier), (own, later)], later)
        assert await store.drift_cursors(conn) == {shared: later, own: later}
    finally:
        await conn.close()
