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
"""

from dataclasses import dataclass
from datetime import datetime, timedelta


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

    def advanced(self, whole: bool) -> datetime | None:
        """The cursor after this scan: `judged_to` when the account's listing was whole
        (every effect and every leg of the span was judged); None (it stays where it was)
        when it was cut, unavailable or unreadable, so the legs that scan could not judge
        are judged by the next whole one."""
        return self.judged_to if whole else None


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
    filter (store.unreported) keeps what was found before from being reported twice.

    The first scan of a process is one (`scans_before` 0), so a reconciler restarted more
    often than every N intervals still runs it; it costs what every scan cost before the
    cursors, no more, and it sets the cursor a fresh deployment's next scan starts from."""
    return scans_before % every == 0
