"""How far a cut listing reaches (reconcilers.drift.cut_edge): the one rule `covers` judges
a leg by, `first_covered` bounds the ledger's read by and a hole ends at. A leg is covered
only when dispatched more than the grace after the cut: the provider's clock may differ from
recon's, and an effect created at the cut's very instant may be one the cut left out."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.definition import Leg
from reconcilers.drift import LedgerEntry, compare, covers, cut_edge, first_covered
from reconcilers.drift_span import Hole, Span
from services.providers.interface import NOTHING_COVERED

CUT = datetime(2026, 12, 6, 12, tzinfo=UTC)
GRACE = timedelta(seconds=60)
STEP = timedelta(microseconds=1)
LATEST = datetime.max.replace(tzinfo=UTC)
EARLIEST = datetime.min.replace(tzinfo=UTC)
EAST = timezone(timedelta(hours=5))
WEST = timezone(timedelta(hours=-5))
# 0000-12-31T19:00 in UTC: before the first instant datetime holds.
FIRST_DAY_EAST = datetime(1, 1, 1, tzinfo=EAST)
# 10000-01-01T04:59 in UTC: past the last.
LAST_MINUTE_WEST = datetime(9999, 12, 31, 23, 59, tzinfo=WEST)
# A scan's span (reconcilers.drift_span): what a cut listing leaves unjudged is kept as a hole.
SPAN = Span(CUT - timedelta(hours=1), CUT, CUT - timedelta(hours=1) - GRACE)


def test_a_leg_dispatched_a_grace_after_the_cut_exactly_is_not_covered() -> None:
    assert not covers(CUT, GRACE, CUT + GRACE)
    assert covers(CUT, GRACE, CUT + GRACE + STEP)
    assert not covers(CUT, GRACE, CUT + GRACE - STEP)
    assert not covers(CUT, GRACE, CUT)
    # The ledger is read from the first covered instant on, no earlier and no later.
    assert first_covered(CUT, GRACE, CUT - GRACE) == cut_edge(CUT, GRACE) == CUT + GRACE + STEP


def test_the_cut_is_an_instant_whatever_its_zone() -> None:
    east = CUT.astimezone(timezone(timedelta(hours=5)))
    assert not covers(east, GRACE, CUT + GRACE)
    assert covers(east, GRACE, CUT + GRACE + STEP)


def test_a_whole_listing_covers_every_leg_since_the_span() -> None:
    assert covers(None, GRACE, CUT - timedelta(days=400))
    assert covers(None, GRACE, LATEST)
    assert first_covered(None, GRACE, CUT) == CUT


def test_a_cut_below_the_span_reads_the_ledger_from_the_span() -> None:
    since = CUT + timedelta(hours=1)
    assert first_covered(CUT, GRACE, since) == since


def test_a_listing_of_unknown_order_covers_no_leg() -> None:
    assert cut_edge(NOTHING_COVERED, GRACE) is None
    assert not covers(NOTHING_COVERED, GRACE, LATEST)
    assert not covers(NOTHING_COVERED, timedelta(0), LATEST)
    assert first_covered(NOTHING_COVERED, GRACE, CUT) == LATEST


def test_a_cut_whose_edge_passes_the_last_instant_covers_no_leg() -> None:
    # A provider listing effects created in the year 9999: a grace past the cut is beyond
    # datetime.max, and an instant west of Greenwich on its last day is beyond it in UTC,
    # which no database driver could send as the ledger's bound.
    within_a_grace = LATEST - GRACE / 2
    west = datetime(9999, 12, 31, 23, tzinfo=WEST)
    for cut in (within_a_grace, west, LAST_MINUTE_WEST):
        assert cut_edge(cut, GRACE) is None
        assert not covers(cut, GRACE, LATEST)
        assert first_covered(cut, GRACE, CUT) == LATEST


def test_a_cut_whose_edge_is_before_the_first_instant_covers_no_leg() -> None:
    # By the rule such a cut would cover every leg: the listing would hold every effect
    # ever created. A provider that dates its oldest effect in the year 1 is not believed
    # to prove anything absent: no leg is covered (no `intent_without_effect` from it), the
    # ledger is read for none, and the span stays a hole for a later listing (drift_span).
    # The safe side, as at the last instant: a missed drift is reported by a later whole
    # listing, a false one would send an operator after an effect that exists.
    for cut in (FIRST_DAY_EAST, FIRST_DAY_EAST + GRACE, datetime(1, 1, 1, 4, 58, tzinfo=EAST)):
        assert cut_edge(cut, GRACE) is None
        for dispatched_at in (EARLIEST, CUT, LATEST):
            assert not covers(cut, GRACE, dispatched_at)
        assert first_covered(cut, GRACE, EARLIEST) == first_covered(cut, GRACE, CUT) == LATEST
        assert SPAN.left_out(cut, GRACE) == Hole(SPAN.judged_from, SPAN.judged_to)


def test_a_cut_before_the_first_instant_whose_edge_is_after_it_covers_from_its_edge() -> None:
    # Only the cut's own instant is out of range in UTC: its edge, a grace later, is not,
    # and the rule holds there as anywhere.
    grace = timedelta(hours=6)
    edge = datetime(1, 1, 1, 1, tzinfo=UTC) + STEP
    assert cut_edge(FIRST_DAY_EAST, grace) == edge
    assert covers(FIRST_DAY_EAST, grace, edge)
    assert not covers(FIRST_DAY_EAST, grace, edge - STEP)
    assert first_covered(FIRST_DAY_EAST, grace, EARLIEST) == edge
    assert SPAN.left_out(FIRST_DAY_EAST, grace) is None  # every leg of the span judged


NOW = datetime(2026, 12, 7, tzinfo=UTC)
WINDOW_START = NOW - timedelta(days=1)


@pytest.mark.parametrize(
    ("cut", "grace", "reported"),
    [
        (None, GRACE, 3),  # a whole listing: every confirmed leg without its effect
        (NOW - timedelta(hours=10), GRACE, 1),
        (FIRST_DAY_EAST, GRACE, 0),
        (FIRST_DAY_EAST, timedelta(hours=6), 3),
        (LAST_MINUTE_WEST, GRACE, 0),
        (NOTHING_COVERED, GRACE, 0),
    ],
    ids=["whole", "cut", "first_day_east", "first_day_east_6h", "last_minute_west", "unknown"],
)
def test_compare_reports_missing_effects_of_exactly_the_legs_the_ledger_is_read_for(
    cut: datetime | None, grace: timedelta, reported: int
) -> None:
    # Confirmed legs whose effects the listing does not hold, all past the grace: compare
    # reports those the cut covers, and the runtime reads the ledger for those dispatched
    # from first_covered on (reconcilers.store.ledger, `absent_from`). A leg compare would
    # report that the read leaves out is drift never found; one read that compare never
    # reports, a wasted read.
    ledger = [
        LedgerEntry(
            tenant="demo",
            tx_id=f"tx-{age}",
            action="charge",
            leg=Leg.FORWARD,
            op_key=f"rk1_{age}",
            provider="sandbox",
            operation="payments.charge",
            payload={},
            dispatched_at=NOW - age,
            confirmed=True,
        )
        for age in (timedelta(hours=20), timedelta(hours=12), timedelta(hours=8))
    ]
    found = compare(
        covered_from=cut,
        grace=grace,
        ledger=ledger,
        effects=[],
        known_keys=set(),
        provider="sandbox",
        now=NOW,
        window_start=WINDOW_START,
    )
    bound = first_covered(cut, grace, WINDOW_START)
    read = {leg.op_key for leg in ledger if leg.dispatched_at >= bound}
    assert {drift.op_key for drift in found} == read
    assert len(found) == reported


ZONES = st.sampled_from([UTC, timezone(timedelta(hours=5)), timezone(timedelta(hours=-5))])
INSTANTS = st.datetimes(timezones=ZONES)
NEAR_THE_END = st.datetimes(min_value=datetime(9999, 12, 30), timezones=ZONES)
NEAR_THE_START = st.datetimes(max_value=datetime(1, 1, 2), timezones=ZONES)
CUTS = st.none() | st.just(NOTHING_COVERED) | INSTANTS | NEAR_THE_END | NEAR_THE_START
GRACES = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=2))
# Where a leg or a span's start lies from a grace past the cut: at the boundary, within a
# few microseconds of it, or anywhere around it.
AROUND = st.timedeltas(-STEP * 3, STEP * 3) | st.timedeltas(-timedelta(days=3), timedelta(days=3))


def _past_the_grace(cut: datetime | None, grace: timedelta, offset: timedelta) -> datetime:
    anchor = CUT if cut is None or cut == NOTHING_COVERED else cut
    try:
        return anchor + grace + offset
    except OverflowError:
        return anchor


@given(cut=CUTS, grace=GRACES, since=AROUND, dispatched=AROUND)
def test_the_ledger_bound_leaves_out_no_covered_leg_and_reads_no_more(
    cut: datetime | None, grace: timedelta, since: timedelta, dispatched: timedelta
) -> None:
    start = _past_the_grace(cut, grace, since)
    dispatched_at = _past_the_grace(cut, grace, dispatched)
    bound = first_covered(cut, grace, start)
    if dispatched_at < start:
        return  # before the span: judged by an earlier scan, never read
    # A lower bound: every leg of the span it leaves out is one the cut does not cover.
    if dispatched_at < bound:
        assert not covers(cut, grace, dispatched_at)
    # Exact: every leg it reads is covered, but when the cut covers none (then nothing
    # is read: the bound is the last instant).
    elif cut is None or cut_edge(cut, grace) is not None:
        assert covers(cut, grace, dispatched_at)
    else:
        assert bound == LATEST


@given(cut=INSTANTS | NEAR_THE_END | NEAR_THE_START, grace=GRACES, dispatched=AROUND)
def test_covered_means_dispatched_more_than_a_grace_after_the_cut(
    cut: datetime, grace: timedelta, dispatched: timedelta
) -> None:
    # The rule as docs/webhooks-reviews-drift.md states it, in durations (which hold any
    # two instants' distance), but for an edge before the first instant: the safe side.
    dispatched_at = _past_the_grace(cut, grace, dispatched)
    if EARLIEST - cut > grace + STEP:
        assert not covers(cut, grace, dispatched_at)
        assert cut_edge(cut, grace) is None
        return
    assert covers(cut, grace, dispatched_at) == (dispatched_at - cut > grace)
    if LATEST - cut >= grace + STEP:
        edge = cut_edge(cut, grace)
        assert edge is not None and edge - cut == grace + STEP and edge.tzinfo == UTC
