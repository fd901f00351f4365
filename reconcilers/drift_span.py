"""What one drift scan of one provider account judges: the span between the account's
cursor and the scan's `now` less the grace, and how far the cursor may then move.

Pure: no I/O, no clock (`now` comes in). The cursor is kept in Postgres
(`reconciler_drift_cursors`, reconcilers.store); the runtime (services.pull_reconciler)
reads it, asks the account for its effects since `ask_since`, lets
reconcilers.drift.compare judge from `judged_from`, and writes `advanced` back.

Why a cursor: the scan used to re-read the whole window (RECON_DRIFT_WINDOW_S) at every
RECON_DRIFT_INTERVAL_S, so each effect was listed window / interval (~1,440) times, and a
listing cut at its page cap covered only the newest minutes: older legs of the window were
never judged at a high rate. Now each effect and each leg is judged once its grace has
passed, by the first scan whose listing of its account was whole.

Why a hole: a listing cut at its page cap covers only its newest effects, so a cursor that
stayed put made every later scan list the same newest pages, and nothing below the cut was
ever judged. An adapter that can list below an instant (`lists_until`, services.providers.
listing) lets the cursor move on over a cut listing: what the cut left out is kept as the
account's Hole, and each later scan also lists the hole from its top down (`hole_span`), a
page cap at a time, until it closes.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from reconcilers.drift import cut_edge


@dataclass(frozen=True)
class Span:
    """`judged_from`: the account's cursor (what came before it was judged by an earlier
    scan), never older than the window's start. `judged_to`: the scan's `now` less the
    grace; what is younger waits for a later scan (the projections may lag the provider).
    `ask_since`: the listing's filter, a grace before `judged_from`, because the cursor is
    recon's clock and an effect's creation time the provider's."""

    judged_from: datetime
    judged_to: datetime
    ask_since: datetime
    # A hole's span (hole_span): what is created or dispatched at or after `judged_below`
    # is not judged (the span above it was); the listing asks for what was created before
    # `ask_until`, a grace past it (the provider's clock may differ from recon's). None
    # for the span up to now.
    judged_below: datetime | None = None
    ask_until: datetime | None = None

    def advanced(self, whole: bool) -> datetime | None:
        """The cursor after this scan: `judged_to` when the account's listing was whole
        (every effect and every leg of the span was judged), or cut with what it left out
        kept as a hole (`left_out`); None (it stays where it was) when it was cut with no
        hole kept (an adapter that cannot list below an instant), unavailable or unreadable,
        so the legs that scan could not judge are judged by the next whole one."""
        return self.judged_to if whole else None

    def left_out(
        self, covered_from: datetime | None, grace: timedelta, newest: datetime | None = None
    ) -> "Hole | None":
        """What a listing of this span cut at `covered_from` (None: whole) left unjudged:
        reconcilers.drift.compare judges an effect created after `covered_from` and a
        leg the cut covers (reconcilers.drift.covers: dispatched more than `grace` after
        it), so [judged_from, covered_from + grace] is left, or nothing when that is
        empty. A listing of unknown order (NOTHING_COVERED) covers nothing: the whole span
        is left.

        A hole's span whose listing proved nothing of its top (a page cap of effects
        within two graces of it: the provider made them faster than a listing can hold)
        would be listed the same way at every scan, and nothing below it ever judged: the
        legs of its top are given up instead (`gives_up`), never its effects. The hole's
        top goes to a grace below the cut, so the next listing (which asks up to a grace
        past the top) asks for what was created up to the cut's instant, no higher: the
        listing goes on exactly below what this one listed. `newest`: the listing's newest
        effect; when it is the cut's instant too (a whole page cap created at one instant,
        as Stripe's whole seconds can make it) the next listing would be this one again, so
        the rest of that instant is given up with it and the top goes a grace below it."""
        if covered_from is None:
            return None
        top = self.judged_to if self.judged_below is None else self.judged_below
        # The legs compare judges are those the cut covers (from its edge on): the hole
        # ends there, a leg dispatched a grace after the cut exactly being left too.
        covered = cut_edge(covered_from, grace)
        if covered is None:  # NOTHING_COVERED, or an edge out of range (drift.cut_edge)
            edge = top
        else:
            edge = min(covered, top)
            if self.gives_up(covered_from, grace):
                # The provider rounds `ask_until` up to its own tick (the sandbox's
                # millisecond, Stripe's second), so asking below the cut plus one
                # microsecond lists the cut's instant again and nothing above it.
                below_cut = (
                    covered_from + _TICK
                    if newest is not None and newest > covered_from
                    else covered_from
                )
                # Kept while effects are left below the cut, though no leg is (a top at or
                # under the start): dropped, they would never be listed.
                edge = below_cut - grace
                return Hole(self.judged_from, edge) if below_cut > self.judged_from else None
        return Hole(self.judged_from, edge) if edge > self.judged_from else None

    def gives_up(self, covered_from: datetime | None, grace: timedelta) -> bool:
        """Whether `left_out` gives up this hole's top (see there): the legs dispatched
        from a grace before the cut to the top are not judged for a missing effect (proving
        one absent takes a listing that holds every effect within a grace either side of
        its dispatch, and no listing of a page cap holds them). Its effects are not given
        up: later listings go on below the cut."""
        if self.judged_below is None or covered_from is None or grace <= timedelta(0):
            return False
        covered = cut_edge(covered_from, grace)
        # None (NOTHING_COVERED, an edge out of range): the hole is kept whole, nothing given up.
        return covered is not None and covered >= self.judged_below


# The smallest step of an instant: what a provider rounds up to its own tick.
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class Hole:
    """[since, below): the part of an account's judged span (under its cursor) that a cut
    listing left out: its legs are not judged yet, nor maybe its effects and those of the
    grace past `below` (its listing asks for them: hole_span). Kept with the cursor
    (`reconciler_drift_cursors.hole_from`, `hole_to`, migration 0011)."""

    since: datetime
    below: datetime

    def hull(self, other: "Hole | None") -> "Hole":
        """One hole holding both: what lies between them was judged, and is judged again
        (the reported-drift filter keeps it from being reported twice), the safe side of
        keeping one hole per account."""
        if other is None:
            return self
        return Hole(min(self.since, other.since), max(self.below, other.below))


def hole_span(hole: Hole, now: datetime, window: timedelta, grace: timedelta) -> Span | None:
    """The span of a scan at `now` over an account's hole: from the hole's start (never
    older than the window's: what is older is out of every scan's reach, as for a cursor)
    to below its top; None when nothing of it is left in the window. A hole whose top is
    at or under its start holds no leg, only effects up to a grace past its top (one whose
    top's legs were given up: Span.left_out)."""
    judged_from = max(hole.since, now - window)
    if hole.below + grace <= judged_from:
        return None
    return Span(
        judged_from=judged_from,
        judged_to=hole.below,
        ask_since=judged_from - grace,
        judged_below=hole.below,
        ask_until=hole.below + grace,
    )


def span(cursor: datetime | None, now: datetime, window: timedelta, grace: timedelta) -> Span:
    """The span of a scan at `now` of an account whose cursor is `cursor` (None: it was
    never scanned whole, so the whole window is judged, as a first scan did before). A
    cursor older than the window (the reconciler was stopped for longer) starts at the
    window: what is older is out of every scan's reach, as it always was. A cursor past
    `now` less the grace (a clock set back) makes an empty span, and it never moves back."""
    window_start = now - window
    judged_from = window_start if cursor is None else max(cursor, window_start)
    return Span(
        judged_from=judged_from,
        judged_to=now - grace,
        ask_since=judged_from - grace,
    )


def backstop_due(scans_before: int, every: int) -> bool:
    """Whether a process's scheduled scan, after `scans_before` of its own, is a backstop
    (RECON_DRIFT_BACKSTOP_EVERY): the whole window of every account, its cursor not read
    (moved on over a whole listing, as by any scan: it judged the span and more). Judged
    once, a leg that turns failed after its effect was judged (a review resolved
    `not_applied` while the provider had applied it), an effect the provider lost or lists
    later than its grace, and what a listing cut at every scan leaves out are not found by
    the incremental spans; the backstop judges them again, and the reported-drift
    filter (store.claiming_reports) keeps what was found before from being reported twice.

    The first scan of a process is one (`scans_before` 0), so a reconciler restarted more
    often than every N intervals still runs it; it costs what every scan cost before the
    cursors, no more, and it sets the cursor a fresh deployment's next scan starts from."""
    return scans_before % every == 0


def bottom_slice(
    since: datetime, top: datetime, spanned: timedelta, listed: int, held: int, grace: timedelta
) -> Hole | None:
    """The slice of a hole [since, top) to list from its bottom up, after a listing of
    `listed` effects that spanned `spanned` (the top's cut listing, from its cut to its
    `ask_until`, or the last slice's whole one), `held` the most one listing holds (its
    page cap): as wide as it must be to hold half a page cap at that listing's rate of
    effects, less the two graces its own listing asks past its ends (hole_span), and never
    past `top`. None when that listing was so dense that nothing would be left.

    Why: every scan's cut joins what it left out to the top of the hole (Hole.hull), and
    the walk lists the top first, so while the provider makes effects faster than the
    walk's listing covers them, the top keeps the walk busy and the hole's oldest part
    waits until the load falls, or leaves the window unjudged. A whole listing of the
    bottom lifts it, so the bottom rises at every scan whatever the top does, by about half
    a page cap of effects a slice; a bottom busier than the rate it was sized by is cut,
    lifts nothing, and waits for the top's walk as before. An empty or sparse slice sizes
    the next by its own rate (at least one effect), so a quiet stretch is crossed in a few
    slices."""
    width = spanned * (held / 2) / max(listed, 1) - 2 * grace
    if width <= timedelta(0) or since >= top:
        return None
    return Hole(since, min(since + width, top))
