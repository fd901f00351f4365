"""The bottom of a drift hole under sustained load, against the real sandbox, Postgres and
Kafka. Each scan's cut listing joins what it left out to the top of the account's hole,
and the walk lists the hole from its top down: while the provider makes effects faster
than the walk's listing covers (here 45 a minute, a page cap of 20, a grace of 2 s),
the top keeps the walk busy and the hole's oldest part waits until the load falls, or
leaves the window unjudged. The walk also lists the hole's bottom up (Reconciler.
_hole_bottom, reconcilers.drift_span.bottom_slice): a stray there is reported by the
next scan that walks it.

The load is made by hand, not waited for: before each scan (its clock set a minute after
the last) the sandbox is given that minute's strays, written straight into its store with
their creation instants, and forgets them after the test. `-s` prints how many scans the
bottom stray took (docs/webhooks-reviews-drift.md quotes the figure)."""

import dataclasses
from datetime import UTC, datetime, timedelta

from support.drift_scanner import (
    forget_effects,
    hole,
    sandbox_of,
    scanner_settings,
    scans_by_hand,
    strays_at,
)
from support.recon_client import Recon

from services.config import Settings
from services.devtools.stack import Stack
from services.pull_reconciler.runtime import open_reconciler

GRACE = timedelta(seconds=2)
INTERVAL = timedelta(seconds=60)
CAP = 20  # one page of 20
PER_INTERVAL = 45  # above 2 x CAP / (INTERVAL + 4 x GRACE): the top outgrows the walk
SCANS = 12  # before the change the bottom stray was not reported in these


def spread(start: datetime, end: datetime, n: int) -> list[datetime]:
    """`n` instants evenly in [start, end), in whole milliseconds as the sandbox keeps them."""
    step = (end - start) / n
    return [
        (start + step * i).replace(microsecond=(start + step * i).microsecond // 1000 * 1000)
        for i in range(n)
    ]


async def test_a_stray_at_a_holes_bottom_is_reported_under_sustained_load(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)  # the test runs the scans itself
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    clocks = [start + INTERVAL * (k + 1) for k in range(SCANS)]
    base = scanner_settings(stack, grace_s=GRACE.total_seconds())

    def seen_from(now: datetime) -> Settings:
        """The scanner's settings at `now`: its window starts a second before `start`
        (the test's own effects alone), as the hole then does."""
        window = (now - start + timedelta(seconds=1)).total_seconds()
        return dataclasses.replace(
            base, reconciler=dataclasses.replace(base.reconciler, drift_window_s=window)
        )

    # The stray at the bottom, then the first minute's load above it.
    made = strays_at(stack, [start + GRACE])
    bottom = made[0]
    try:
        async with open_reconciler(seen_from(clocks[0])) as scanner:
            sandbox = sandbox_of(scanner)
            sandbox.max_list_pages, sandbox.list_page = 1, CAP
            found: set[str] = set()
            scans = 0
            for k, now in enumerate(clocks):
                since = start + 2 * GRACE if k == 0 else clocks[k - 1] - GRACE
                made += strays_at(stack, spread(since, now - GRACE, PER_INTERVAL))
                scanner.clock = lambda now=now: now  # type: ignore[misc]
                scanner.settings = seen_from(now)
                found |= {d.effect_id or "" for d in await scanner.drift_scan()}
                scans += 1
                if bottom in found:
                    break
            print(
                f"\nthe stray at the hole's bottom: reported by scan {scans} of {SCANS}"
                f" (reported at all: {bottom in found}); the hole after: {await hole(stack)}"
            )
            assert bottom in found, f"not reported in {scans} scans"
            assert scans <= 2  # the first scan makes the hole, the second walks it
    finally:
        forget_effects(stack, made)
