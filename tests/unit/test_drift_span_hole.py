"""The part of an account's span a cut listing left out (reconcilers.drift_span.Hole): what
a cut keeps, how a later scan lists it from its top down, and that the walk always gets to
the bottom; compare judging a hole's span below its top alone."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from events.definition import Leg
from events.drift import DriftKind
from reconcilers.drift import Effect, LedgerEntry, compare
from reconcilers.drift_span import Hole, Span, bottom_slice, hole_span, span
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
    # A leg dispatched a grace after the cut exactly is not judged (strictly after): kept.
    tick = timedelta(microseconds=1)
    assert span(CURSOR, NOW, WINDOW, GRACE).left_out(cut, GRACE) == Hole(CURSOR, cut + GRACE + tick)


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
    assert below.left_out(cut, GRACE) == Hole(CURSOR, cut + GRACE + timedelta(microseconds=1))
    assert below.left_out(None, GRACE) is None  # whole: closed
    assert not below.gives_up(cut, GRACE)


def test_a_holes_listing_that_proves_nothing_of_its_top_gives_up_its_legs_not_its_effects() -> None:
    """A page cap of effects within two graces of the top: listed the same at every scan,
    the walk would never get below it. The legs of the top are given up; the hole's top
    goes a grace below the cut, so the next listing (up to a grace past the top) asks for
    the cut's instant and below: the effects the cut left out."""
    hole = Hole(CURSOR, NOW - timedelta(minutes=2))
    below = hole_span(hole, NOW, WINDOW, GRACE)
    assert below is not None
    cut = hole.below - GRACE / 2
    assert below.gives_up(cut, GRACE)
    tick = timedelta(microseconds=1)
    rest = below.left_out(cut, GRACE, newest=cut + timedelta(seconds=1))
    assert rest == Hole(CURSOR, cut + tick - GRACE)
    after = hole_span(rest, NOW, WINDOW, GRACE)
    assert after is not None and after.ask_until == cut + tick
    # A whole page cap at the cut's instant: asking to it again would list the same page,
    # so the rest of that instant is given up too.
    assert below.left_out(cut, GRACE, newest=cut) == Hole(CURSOR, cut - GRACE)
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


def test_a_holes_bottom_slice_holds_half_a_page_cap_at_the_listings_rate() -> None:
    """The slice of a hole's bottom listed besides its top (bottom_slice): sized to hold
    half a page cap at the rate of the listing it follows, less the two graces its own
    listing asks past its ends, and never past the hole's top; none when that rate leaves
    nothing."""
    top = NOW - timedelta(minutes=2)
    grace = timedelta(seconds=2)
    # 20 effects in 40 s: half a cap (10) takes 20 s, less the two graces.
    assert bottom_slice(CURSOR, top, timedelta(seconds=40), 20, 20, grace) == Hole(
        CURSOR, CURSOR + timedelta(seconds=16)
    )
    # An empty slice sizes the next by one effect's rate: ten times as wide.
    assert bottom_slice(CURSOR, top, timedelta(seconds=20), 0, 20, grace) == Hole(
        CURSOR, CURSOR + timedelta(seconds=196)
    )
    assert bottom_slice(CURSOR, top, timedelta(days=1), 1, 20, grace) == Hole(CURSOR, top)
    # Half a cap within two graces: nothing left to list.
    assert bottom_slice(CURSOR, top, timedelta(seconds=8), 20, 20, grace) is None
    assert bottom_slice(top, top, timedelta(days=1), 1, 20, grace) is None


@given(
    offsets_s=st.lists(st.integers(min_value=0, max_value=3_000), min_size=1, max_size=80),
    cap=st.integers(min_value=2, max_value=8),
)
def test_the_walk_with_its_bottom_slices_judges_every_effect_and_leg_it_does_not_give_up(
    offsets_s: list[int], cap: int
) -> None:
    """The walk as Reconciler._hole and _hole_bottom run it: a listing of the top, then up
    to three slices of the bottom up (bottom_slice), each whole one lifting the hole's
    start. Whatever the times, the hole closes; each effect is judged by some listing but
    a cap's overflow at one instant, and each leg (one at each effect's time, say) is
    judged but those of a top given up: a bottom slice never lifts past what it did not
    judge."""
    times = [CURSOR + timedelta(seconds=s) for s in offsets_s]
    hole: Hole | None = Hole(CURSOR, CURSOR + timedelta(seconds=3_001))
    effects_judged: set[datetime] = set()
    legs_judged: set[datetime] = set()
    crowded: set[datetime] = set()
    given_up: list[tuple[datetime, datetime]] = []

    def walk(judged: Span) -> tuple[list[datetime], datetime | None]:
        """One listing of `judged`: what it lists and its cut; what it judges noted."""
        assert judged.ask_until is not None and judged.judged_below is not None
        page = _listing(times, judged.ask_since, judged.ask_until, cap)
        more = len(_listing(times, judged.ask_since, judged.ask_until, cap + 1)) > cap
        cut = min(page) if more else None
        effects_judged.update(
            t for t in page if judged.judged_from <= t < judged.judged_below + GRACE
        )
        legs_judged.update(
            t
            for t in times
            if judged.judged_from <= t < judged.judged_below and (cut is None or t - GRACE > cut)
        )
        if more and min(page) == max(page):
            crowded.add(min(page))
        return page, cut

    scans = 0
    while hole is not None:
        scans += 1
        assert scans <= 200
        below = hole_span(hole, NOW, WINDOW, GRACE)
        assert below is not None and below.ask_until is not None
        page, cut = walk(below)
        rest = below.left_out(cut, GRACE, max(page, default=None))
        if below.gives_up(cut, GRACE):
            given_up.append((CURSOR if rest is None else rest.below, hole.below))
        elif rest is not None and cut is not None:
            spanned, listed, since = below.ask_until - cut, len(page), rest.since
            for _ in range(3):
                piece = bottom_slice(since, rest.below, spanned, listed, cap, GRACE)
                sliced = None if piece is None else hole_span(piece, NOW, WINDOW, GRACE)
                if piece is None or sliced is None or sliced.ask_until is None:
                    break
                page, cut = walk(sliced)
                listed = len(page)
                if cut is None:
                    since, spanned = piece.below, sliced.ask_until - sliced.ask_since
                else:
                    spanned = sliced.ask_until - cut
            rest = Hole(since, rest.below) if since < rest.below else None
        assert rest is None or rest.below <= hole.below
        hole = rest
    for t in times:
        assert t in effects_judged or t in crowded, t
        assert t in legs_judged or any(low <= t < high for low, high in given_up), t
