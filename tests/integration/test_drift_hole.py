"""A drift listing continued below its cut, against the real sandbox and Postgres (and
Kafka, where the findings go). A listing cut at its page cap holds the newest effects
only; before the hole (reconcilers.drift_span.Hole, migration 0011) the cursor stayed
put, every later scan listed the same newest pages, and an effect without intent or a
confirmed leg without its effect below the cut was never reported. Now an adapter that
lists below an instant (the sandbox's `created_lt`) keeps what the cut left out as the
account's hole, and later scans list it from its top down, a page cap at a time.

A page cap of two effects (one page of two) stands for the sandbox's 10,000, and a window
that starts just before the test's own effects keeps the other tests' out of it. The
scans' clock is set, not waited for: the strays are created (by the sandbox's clock) in
the scans' past, each a few graces from the next, and forgotten after the test. So the
tests share one stack (support.stack_fixtures.module_stack): each its own transaction and
strays, in a window of its own, its scans from a fresh deployment's cursors
(scans_by_hand), and what they count on the drift topic their own strays only."""

import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from prometheus_client import REGISTRY
from support.drift_scanner import (
    a_charge_that_lost_its_effect,
    cursor,
    forget_effects,
    hole,
    lose_effects,
    sandbox_of,
    scanner_settings,
    scans_by_hand,
    strays_at,
)
from support.recon_client import Recon
from support.stack_fixtures import module_stack
from support.topic_records import read_topic

from events.drift import DriftDetected
from events.topics import Topics
from reconcilers import store
from services.config import Settings
from services.devtools.stack import Stack
from services.providers.adapters import PAGE, SandboxAdapter
from services.pull_reconciler.runtime import Reconciler, open_reconciler

stack = module_stack

GRACE = timedelta(seconds=10)
STRAYS = 6
# More than the whole walk takes: the first scan lists two strays, each later one two more
# effects of the hole (the strays, the transaction's effects), then the hole closes.
MAX_SCANS = 12


def settings(stack: Stack, start: datetime, now: datetime) -> Settings:
    """The scanner's settings: its window starts a second before `start` (the test's own
    effects and legs alone), seen from `now`."""
    base = scanner_settings(stack, grace_s=GRACE.total_seconds())
    window = (now - start + timedelta(seconds=1)).total_seconds()
    return dataclasses.replace(
        base, reconciler=dataclasses.replace(base.reconciler, drift_window_s=window)
    )


def burst_after(start: datetime, apart: float = 2.5) -> list[datetime]:
    """The strays' creation instants: from half a minute after `start`, `apart` graces
    apart (the oldest first): 2.5, so each hole listing's cut lies below the last one's."""
    # In whole milliseconds, as the sandbox writes creation times.
    first = start.replace(microsecond=start.microsecond // 1000 * 1000) + timedelta(seconds=30)
    return [first + apart * GRACE * i for i in range(STRAYS)]


@dataclasses.dataclass
class Burst:
    scanner: Reconciler
    now: datetime  # the scans' clock: a few graces after the newest stray
    instants: list[datetime]
    strays: list[str]
    charge: str  # the op key of the charge whose effect the sandbox lost


@asynccontextmanager
async def burst_below(
    stack: Stack, recon: Recon, tx_id: str, apart: float = 2.5
) -> AsyncIterator[Burst]:
    """A committed charge whose effect the sandbox lost, then the strays (burst_after) in
    the scans' past, and a scanner of a page cap of two whose clock is set after them; the
    strays and the transaction's other effects are forgotten by the sandbox when the test
    is done. A scan lists from a grace below its window: the last test's reserve, made a
    few seconds before, filled the hole's bottom listing (a cap of two) there, and the
    legs of that grace, this test's charge among them, were given up unjudged."""
    await scans_by_hand(stack)  # the test runs the scans itself
    start = datetime.now(UTC)
    charge = await a_charge_that_lost_its_effect(stack, recon, tx_id)
    instants = burst_after(start, apart)
    now = instants[-1] + 3 * GRACE
    strays = strays_at(stack, instants)
    try:
        async with open_reconciler(settings(stack, start, now)) as scanner:
            scanner.clock = lambda: now
            sandbox = sandbox_of(scanner)
            sandbox.max_list_pages, sandbox.list_page = 1, 2
            yield Burst(scanner, now, instants, strays, charge)
    finally:
        forget_effects(stack, strays)
        made = (await recon.get(tx_id)).json()
        lose_effects(stack, *(o["op_key"] for o in made["operations"]))


def found_ids(found: list[DriftDetected]) -> set[str]:
    return {d.effect_id or d.op_key or "" for d in found}


async def test_drift_below_a_cut_listing_is_reported_by_later_scans(
    stack: Stack, recon: Recon
) -> None:
    async with burst_below(stack, recon, "hole-below") as b:
        first = found_ids(await b.scanner.drift_scan())
        # The newest two strays; the older ones and the leg lie below the cut.
        assert first == set(b.strays[-2:]), first
        judged_to = await cursor(stack)
        assert judged_to == b.now - GRACE  # moved on: what the cut left out is the hole
        left = await hole(stack)
        tick = timedelta(microseconds=1)  # a leg a grace after the cut exactly is left too
        assert left is not None and left[1] == b.instants[-2] + GRACE + tick, left

        later: set[str] = set()
        scans = 1
        while await hole(stack) is not None:
            assert scans < MAX_SCANS, f"the hole {await hole(stack)} is not closing"
            later |= found_ids(await b.scanner.drift_scan())
            scans += 1
        # Each later scan listed one page cap of the hole: the older strays, an
        # `effect_without_intent` each, and the charge's missing effect.
        assert set(b.strays[:-2]) <= later, (b.strays, later)
        assert b.charge in later
        assert scans >= 3
        assert await cursor(stack) == judged_to


async def test_a_cut_backstop_leaves_a_hole_the_next_scans_close(
    stack: Stack, recon: Recon
) -> None:
    """The backstop reads no cursor and no hole; its cut listing adds what it left out
    to the account's hole, and the incremental scans after it judge that."""
    async with burst_below(stack, recon, "hole-backstop") as b:
        assert found_ids(await b.scanner.drift_scan(full=True)) == set(b.strays[-2:])
        assert await hole(stack) is not None
        assert await cursor(stack) == b.now - GRACE

        later: set[str] = set()
        for _ in range(MAX_SCANS):
            later |= found_ids(await b.scanner.drift_scan())
            if await hole(stack) is None:
                break
        assert set(b.strays[:-2]) <= later and b.charge in later, later
        assert await hole(stack) is None


async def test_a_burst_faster_than_a_cap_within_two_graces_gives_up_legs_but_reports_its_strays(
    stack: Stack, recon: Recon
) -> None:
    """Six strays two seconds apart, a cap of two, a grace of ten: every hole listing
    holds a cap within two graces of the hole's top, so it gives up the legs of that top
    to move down. Counted in recon_drift_graces_given_up_total, which the
    ReconDriftGracesGivenUp alert reads. Its effects are not given up: each next listing
    asks below the cut, so every stray is reported (until stop 50 the top grace was given
    up whole, and the four older strays, inside it, were never reported)."""

    def given_up() -> float:
        sample = REGISTRY.get_sample_value(
            "recon_drift_graces_given_up_total", {"provider": "sandbox"}
        )
        return sample or 0.0

    async with burst_below(stack, recon, "hole-given-up", apart=0.2) as b:
        before = given_up()
        found: set[str] = set()
        for _ in range(MAX_SCANS):
            found |= found_ids(await b.scanner.drift_scan())
            if await hole(stack) is None:
                break
        assert await hole(stack) is None
        assert given_up() >= before + 1
        assert set(b.strays) <= found, (b.strays, found)
        # Each on the topic once, though listed again below each cut.
        drift = Topics(stack.topic_prefix).drift
        records = await read_topic(stack.kafka_bootstrap, drift)
        assert Counter(r["effect_id"] for r in records if r["effect_id"] in b.strays) == {
            s: 1 for s in b.strays
        }


async def test_an_adapter_that_cannot_list_below_an_instant_keeps_its_cursor_as_before(
    stack: Stack, recon: Recon
) -> None:
    """Without `lists_until` a cut listing leaves the cursor where it was and keeps no
    hole, as before the holes: the same newest pages at every scan."""
    async with burst_below(stack, recon, "hole-none") as b:
        sandbox_of(b.scanner).lists_until = False
        for _ in range(3):
            assert found_ids(await b.scanner.drift_scan()) == set(b.strays[-2:])
            assert await cursor(stack) is None
            assert await hole(stack) is None


async def test_a_hole_whose_adapter_no_longer_lists_below_an_instant_is_judged_from_its_start(
    stack: Stack, recon: Recon
) -> None:
    """A hole kept while the adapter listed below an instant, which it no longer does (its
    provider file lost `until_param`, its adapter was changed): nothing walks it, so the
    account is scanned as a cut listing's was before holes, from the hole's start: while
    the listing is cut the hole and the cursor stay, and the first whole one judges what
    the hole held and closes it. Before, the hole stayed in its row unjudged for ever."""
    async with burst_below(stack, recon, "hole-stranded") as b:
        assert found_ids(await b.scanner.drift_scan()) == set(b.strays[-2:])
        left = await hole(stack)
        assert left is not None
        sandbox = sandbox_of(b.scanner)
        sandbox.lists_until = False

        # Still cut: the newest pages again, nothing moved.
        assert found_ids(await b.scanner.drift_scan()) == set(b.strays[-2:])
        assert (await cursor(stack), await hole(stack)) == (b.now - GRACE, left)

        sandbox.max_list_pages, sandbox.list_page = SandboxAdapter.max_list_pages, PAGE
        later = found_ids(await b.scanner.drift_scan())
        assert set(b.strays[:-2]) <= later and b.charge in later, later
        assert (await cursor(stack), await hole(stack)) == (b.now - GRACE, None)


async def test_a_cursor_never_moves_past_a_cut_without_its_hole(
    stack: Stack, recon: Recon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hole is written in the cursors' transaction: when its write fails (Postgres
    gone, or the process killed there) the cursor stays too, and the next scan lists the
    same cut again, producing nothing twice. A cursor moved without its hole would mark
    what lies below the cut judged, and it would never be."""
    async with burst_below(stack, recon, "hole-atomic") as b:

        async def lost(conn: asyncpg.Connection, written: list[store.HoleWrite]) -> None:
            raise ConnectionResetError("the connection was lost while writing the hole")

        real = store.write_drift_holes
        monkeypatch.setattr(store, "write_drift_holes", lost)
        with pytest.raises(ConnectionResetError):
            await b.scanner.drift_scan()
        assert (await cursor(stack), await hole(stack)) == (None, None)

        monkeypatch.setattr(store, "write_drift_holes", real)
        again = found_ids(await b.scanner.drift_scan())
        assert again == set(b.strays[-2:])
        assert await cursor(stack) == b.now - GRACE and await hole(stack) is not None
        # Produced once each, though found by both scans.
        drift = Topics(stack.topic_prefix).drift
        records = await read_topic(stack.kafka_bootstrap, drift)
        assert Counter(r["effect_id"] for r in records if r["effect_id"] in again) == {
            s: 1 for s in b.strays[-2:]
        }
