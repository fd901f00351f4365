"""The part of an account's span a cut listing left out (reconcilers.drift_span.Hole): what
a cut keeps, how a later scan lists it from its top down, and that the walk always gets to
the bottom; compare judging a hole's span below its top alone."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from events.definition import Leg
from events.drift import DriftKind
from reconcilers.drift import Effect, LedgerEntry, compare
from reconcilers.drift_span import Hole, hole_span, span
from services.providers.interface import NOTHING_COVERED

NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)
WINDOW = timedelta(days=1)
GRACE = timedelta(seconds=60)
CURSOR = NOW - timedelta(minutes=10)


def test_a_whole_listing_leaves_nothing_out() -> None:
    assert span(CURSOR, NOW, WINDOW, GRACE).left_out(None, GRACE) is None


def test_a_cut_listing_leaves_out_its_span_up_to_a_grace_past_the_cut() -> None:
    # compare judges a leg dispatched more than a grace after the cut: those before are left.
    cut = NOW - timedelta(minutes=5)
    assert span(CURSOR, NOW, WINDOW, GRACE).left_out(cut, GRACE) == Hole(CURSOR, cut + GRACE)


def test_a_cut_below_the_span_leaves_nothing_out() -> None:
    assert span(CURSOR, NOW, WINDOW, GRACE).left_out(CURSOR - 2 * GRACE, GRACE) is None


def test_a_cut_listing_of_unknown_order_leaves_out_the_whole_span() -> None:
    judged = span(CURSOR, NOW, WINDOW, GRACE)
    assert judged.left_out(NOTHING_COVERED, GRACE) == Hole(CURSOR, NOW - GRACE)


def test_a_holes_span_asks_below_its_top_and_a_grace_past_it() -> None:
    hole = Hole(CURSOR, NOW - timedelta(minutes=5))
    below = hole_span(hole, NOW, WINDOW, GRACE)
    assert below is not None
    assert (below.judged_from, below.judged_below) == (hole.since, hole.below)
    assert (below.ask_since, below.ask_until) == (hole.since - GRACE, hole.below + GRACE)


def test_a_hole_starts_at_the_window_and_one_out_of_it_is_dropped() -> None:
    hole = Hole(NOW - 3 * WINDOW, NOW - WINDOW / 2)
    below = hole_span(hole, NOW, WINDOW, GRACE)
    assert below is not None and below.judged_from == NOW - WINDOW
    assert hole_span(Hole(NOW - 3 * WINDOW, NOW - 2 * WINDOW), NOW, WINDOW, GRACE) is None


def test_a_holes_listing_cut_again_shrinks_it_to_below_the_new_cut() -> None:
    hole = Hole(CURSOR, NOW - timedelta(minutes=2))
    below = hole_span(hole, NOW, WINDOW, GRACE)
    assert below is not None
    cut = NOW - timedelta(minutes=6)
    assert below.left_out(cut, GRACE) == Hole(CURSOR, cut + GRACE)
    assert below.left_out(None, GRACE) is None  # whole: closed
    assert not below.gives_up(cut, GRACE)


def test_a_holes_listing_that_proves_nothing_of_its_top_gives_its_top_grace_up() -> None:
    """A page cap of effects within two graces of the top: listed the same at every scan,
    the walk would never get below it."""
    hole = Hole(CURSOR, NOW - timedelta(minutes=2))
    below = hole_span(hole, NOW, WINDOW, GRACE)
    assert below is not None
    cut = hole.below - GRACE / 2
    assert below.gives_up(cut, GRACE)
    assert below.left_out(cut, GRACE) == Hole(CURSOR, hole.below - GRACE)
    # Unknown order: nothing proved, nothing given up; the hole stays as it was.
    assert not below.gives_up(NOTHING_COVERED, GRACE)
    assert below.left_out(NOTHING_COVERED, GRACE) == hole


def test_two_holes_make_one_holding_both() -> None:
    low, high = Hole(CURSOR, CURSOR + GRACE), Hole(NOW - 3 * GRACE, NOW - GRACE)
    assert low.hull(high) == high.hull(low) == Hole(CURSOR, NOW - GRACE)
    assert low.hull(None) == low


def _listing(times: list[datetime], since: datetime, until: datetime, cap: int) -> list[datetime]:
    """A newest-first listing of `times` in [since, until), cut at `cap`."""
    return sorted((t for t in times if since <= t < until), reverse=True)[:cap]


@given(
    offsets_s=st.lists(st.integers(min_value=0, max_value=3_000), min_size=1, max_size=60),
    cap=st.integers(min_value=1, max_value=5),
)
def test_the_walk_down_a_hole_ends_and_lists_every_effect_it_does_not_give_up(
    offsets_s: list[int], cap: int
) -> None:
    """Every scan lists one page cap of the hole from its top down; whatever the effects'
    times, the hole shrinks at every scan, and each effect in it is listed by some scan
    but those in a top grace given up (more than a page cap within two graces)."""
    times = [CURSOR + timedelta(seconds=s) for s in offsets_s]
    hole: Hole | None = Hole(CURSOR, CURSOR + timedelta(seconds=3_001))
    listed: set[datetime] = set()
    given_up: list[tuple[datetime, datetime]] = []
    scans = 0
    while hole is not None:
        scans += 1
        assert scans <= 200
        below = hole_span(hole, NOW, WINDOW, GRACE)
        assert below is not None and below.ask_until is not None
        page = _listing(times, below.ask_since, below.ask_until, cap)
        more = len(_listing(times, below.ask_since, below.ask_until, cap + 1)) > cap
        covered_from = min(page) if more else None
        listed |= set(page)
        if below.gives_up(covered_from, GRACE):
            given_up.append((hole.below - GRACE, hole.below))
        rest = below.left_out(covered_from, GRACE)
        assert rest is None or rest.below < hole.below  # progress
        hole = rest
    for t in times:
        assert t in listed or any(low <= t < high + GRACE for low, high in given_up), t


def _leg(op_key: str, at: datetime) -> LedgerEntry:
    return LedgerEntry(
        tenant="t",
        tx_id=f"tx-{op_key}",
        action="charge",
        leg=Leg.FORWARD,
        op_key=op_key,
        provider="sandbox",
        operation="payments.charge",
        payload={"amount": 1},
        dispatched_at=at,
        confirmed=True,
    )


def test_a_holes_span_judges_below_its_top_alone() -> None:
    """What is at or above the hole's top was judged by the scan that cut: not again."""
    top = NOW - timedelta(minutes=5)
    effects = [
        Effect(f"ch_{n}", "payments.charge", f"stray-{n}", {}, at)
        for n, at in (("below", top - GRACE), ("above", top + GRACE))
    ]
    ledger = [_leg("lost-below", top - 2 * GRACE), _leg("lost-above", top)]
    found = compare(
        provider="sandbox",
        effects=effects,
        ledger=ledger,
        known_keys=set(),
        now=NOW,
        window_start=CURSOR,
        grace=GRACE,
        judged_below=top,
    )
    assert sorted((d.kind, d.effect_id or d.op_key) for d in found) == [
        (DriftKind.EFFECT_WITHOUT_INTENT, "ch_below"),
        (DriftKind.INTENT_WITHOUT_EFFECT, "lost-below"),
    ]
