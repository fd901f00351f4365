"""How far a cut listing reaches (reconcilers.drift.cut_edge): the one rule `covers` judges
a leg by, `first_covered` bounds the ledger's read by and a hole ends at. A leg is covered
only when dispatched more than the grace after the cut: the provider's clock may differ from
recon's, and an effect created at the cut's very instant may be one the cut left out."""

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from reconcilers.drift import covers, cut_edge, first_covered
from services.providers.interface import NOTHING_COVERED

CUT = datetime(2026, 12, 6, 12, tzinfo=UTC)
GRACE = timedelta(seconds=60)
STEP = timedelta(microseconds=1)
LATEST = datetime.max.replace(tzinfo=UTC)


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
    west = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))
    for cut in (within_a_grace, west):
        assert cut_edge(cut, GRACE) is None
        assert not covers(cut, GRACE, LATEST)
        assert first_covered(cut, GRACE, CUT) == LATEST


ZONES = st.sampled_from([UTC, timezone(timedelta(hours=5)), timezone(timedelta(hours=-5))])
INSTANTS = st.datetimes(timezones=ZONES)
NEAR_THE_END = st.datetimes(min_value=datetime(9999, 12, 30), timezones=ZONES)
CUTS = st.none() | st.just(NOTHING_COVERED) | INSTANTS | NEAR_THE_END
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


@given(cut=INSTANTS | NEAR_THE_END, grace=GRACES, dispatched=AROUND)
def test_covered_means_dispatched_more_than_a_grace_after_the_cut(
    cut: datetime, grace: timedelta, dispatched: timedelta
) -> None:
    # The rule as docs/webhooks-reviews-drift.md states it, where the arithmetic fits.
    dispatched_at = _past_the_grace(cut, grace, dispatched)
    try:
        stated = dispatched_at - grace > cut
        edge = cut.astimezone(UTC) + grace + STEP
    except OverflowError:
        return
    assert covers(cut, grace, dispatched_at) == stated
    assert cut_edge(cut, grace) == edge
