"""The reconciler process: two scheduled jobs around the pure planners.

- The pull tick finds operation legs stuck in `dispatched`/`unknown` (the projection),
  plans lookups with backoff under a budget (reconcilers.pull), claims each lookup in
  Postgres (reconcilers.store), looks it up through the dispatcher's adapters and reports
  what it saw as an OperationObserved (source `lookup`, the leg's current attempt as the
  fencing token). Past the budget it sends RequestReview. The decider decides.
- The drift scan compares each provider account's list of effects with recon's ledger
  (reconcilers.drift) and produces DriftDetected to recon.drift. A tenant's own account
  (RECON_PROVIDER_ACCOUNTS) is listed apart and compared with that tenant's legs alone.
- The purge deletes settled bookkeeping past RECON_RECONCILER_RETENTION_S (store.purge).

Both jobs run with coalesce=True and max_instances=1: a late or piled-up schedule runs
once, and never overlaps itself in this process. Across processes (and for a tick run by
hand next to the scheduled one) the claims in Postgres keep the work single.
"""

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import asyncpg
from aiokafka import AIOKafkaProducer
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from events.drift import DriftDetected
from events.inputs import Outcome, RequestReview, Source
from events.keys import partition_key
from events.observation import Seen, observation
from reconcilers import store
from reconcilers.drift import (
    Effect,
    UnreadableEffect,
    compare,
    effect_from_json,
    first_covered,
)
from reconcilers.drift_span import Hole, Span, backstop_due, bottom_slice, hole_span, span
from reconcilers.pull import (
    Escalate,
    GiveUp,
    Lookup,
    Policy,
    Step,
    observation_id,
    plan,
    review_request_id,
)
from services.closing import stopped_with
from services.config import Settings
from services.crash_points import DRIFT_BEFORE_CURSORS, DRIFT_PRODUCED_CLAIM_OPEN, crash_point
from services.governance.store import switches_holding
from services.kafka_clients import acked_producer
from services.kafka_setup import ensure_recon_topics
from services.kafka_start import start_kafka_client
from services.metrics import DRIFT_GRACES_GIVEN_UP, DRIFT_LISTINGS, labelled
from services.postgres_start import open_pool
from services.providers.accounts import Account
from services.providers.http import ProviderHttp
from services.providers.interface import EffectListing, ListingUnavailable, Sent
from services.providers.listing import can_list_until, listing_of
from services.providers.lookup_strategy import CANNOT_BE_ASKED, Strategy, strategy_of
from services.providers.registry import Accounts, build_accounts
from services.pull_reconciler.gauges import REFRESH_S, refresh_gauges
from services.stop_race import StoppedStarting

log = logging.getLogger(__name__)

MAX_CONCURRENT_LOOKUPS = 16
Clock = Callable[[], datetime]


# Slices of a hole's bottom listed a scan, besides its top (Reconciler._hole_bottom): each
# is sized to hold about half a page cap, so a scan lists about 2.5 page caps of a hole.
BOTTOM_SLICES = 3


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class TickReport:
    looked_up: list[tuple[str, int, int, Outcome]] = field(default_factory=list)
    review_requested: list[tuple[str, int]] = field(default_factory=list)
    given_up: list[tuple[str, int]] = field(default_factory=list)
    # Lookups not made because they would resend under an engaged kill switch.
    held: list[tuple[str, int, tuple[str, ...]]] = field(default_factory=list)


class Reconciler:
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        producer: AIOKafkaProducer,
        accounts: Accounts,
        clock: Clock = _utcnow,
    ) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.pool = pool
        self.producer = producer
        self.accounts = accounts
        self.clock = clock
        config = settings.reconciler
        self.policy = Policy(
            after=timedelta(seconds=config.after_s),
            budget=config.budget,
            backoff=timedelta(seconds=config.backoff_s),
            backoff_max=timedelta(seconds=config.backoff_max_s),
            review_retry=timedelta(seconds=config.review_retry_s),
        )
        self.lookups = asyncio.Semaphore(MAX_CONCURRENT_LOOKUPS)
        # This process's scheduled drift scans so far: every Nth is a backstop.
        self.drift_scans = 0

    # --- the pull tick -------------------------------------------------------------

    async def tick(self) -> TickReport:
        now = self.clock()
        async with self.pool.acquire() as conn:
            candidates = await store.in_flight_legs(conn)
            leases = await store.leases_for(conn, [(c.op_key, c.attempt) for c in candidates])
        report = TickReport()
        steps = plan(candidates, leases, now, self.policy)
        await asyncio.gather(*(self._run(step, now, report) for step in steps))
        return report

    async def _run(self, step: Step, now: datetime, report: TickReport) -> None:
        leg = step.leg
        try:
            match step:
                case Lookup():
                    await self._lookup(step, now, report)
                case Escalate():
                    await self._escalate(step, now, report)
                case GiveUp():
                    await self._give_up(step, now, report)
        except Exception:
            # One leg's failure (Kafka or Postgres away) must not stop the others; the
            # next tick retries whatever was not claimed or not acknowledged.
            log.exception("reconciling %s/%s %s failed", leg.tx_id, leg.action, leg.leg.value)

    async def _lookup(self, step: Lookup, now: datetime, report: TickReport) -> None:
        leg = step.leg
        # The projected leg's tenant: a lookup asks that tenant's account only.
        adapter = self.accounts.adapter_for(leg.tenant, leg.provider)
        async with self.pool.acquire() as conn:
            # A replaying provider's lookup resends the call under its key (services.
            # providers.interface.Sent): if the first request never arrived, the resend
            # makes the effect now. So it is a send, and an engaged kill switch holds it
            # as it holds the dispatcher's: the lookup is not taken (nor its budget), and
            # the leg waits, unknown, for the release. No quota counts it: under the
            # same key a replaying provider makes no second effect.
            resends = adapter is not None and adapter.key_retention_s is not None
            if resends and leg.first is not None:
                held = await switches_holding(
                    conn, leg.tenant, leg.tx_id, leg.provider, leg.operation
                )
                if held:
                    report.held.append((leg.op_key, leg.attempt, tuple(held)))
                    return
            if not await store.claim_lookup(
                conn, leg.op_key, leg.attempt, step.n, step.next_at, now
            ):
                return  # another tick or process took lookup n
        async with self.lookups:
            if adapter is None:
                seen = Seen(Outcome.UNAVAILABLE, error=f"no adapter for provider {leg.provider!r}")
            else:
                # The key's first request, whatever the attempt: the key is the leg's, so a
                # replaying adapter resends only what was first sent under it, judged by a
                # time no later than that send (reconcilers.pull.FirstRequest).
                first = leg.first
                sent = None if first is None else Sent(first.payload, first.at)
                seen = await adapter.lookup(leg.operation, leg.op_key, sent)
        sighting = observation(
            message_id=observation_id(leg.op_key, leg.attempt, step.n),
            tenant=leg.tenant,
            tx_id=leg.tx_id,
            action=leg.action,
            op_key=leg.op_key,
            attempt=leg.attempt,
            source=Source.LOOKUP,
            seen=seen,
            observed_at=self.clock(),
        )
        await self.producer.send_and_wait(
            self.topics.observations,
            value=sighting.model_dump_json().encode(),
            key=partition_key(leg.tenant, leg.tx_id),
        )
        async with self.pool.acquire() as conn:
            await store.record_outcome(conn, leg.op_key, leg.attempt, seen.outcome.value)
        report.looked_up.append((leg.op_key, leg.attempt, step.n, seen.outcome))
        if adapter is not None and strategy_of(adapter) is Strategy.NONE:
            # Nothing can be asked (lookup_strategy `none`): another lookup would learn
            # nothing, so a person is asked now, not after the budget. A signed webhook
            # still settles the leg meanwhile; nothing is ever re-sent.
            await self._escalate(Escalate(leg, step.n, reason=CANNOT_BE_ASKED), now, report)
        log.info(
            "%s %s %s attempt %d: lookup %d/%d %s",
            leg.tx_id,
            leg.action,
            leg.leg.value,
            leg.attempt,
            step.n,
            self.policy.budget,
            seen.outcome.value,
        )

    async def _escalate(self, step: Escalate, now: datetime, report: TickReport) -> None:
        leg = step.leg
        async with self.pool.acquire() as conn:
            if not await store.claim_review(
                conn,
                leg.op_key,
                leg.attempt,
                step.lookups,
                step.requests,
                now,
                now - self.policy.review_wait(step.requests),
            ):
                return
        crash_point("reconciler.after_review_mark")
        command = RequestReview(
            message_id=review_request_id(leg.op_key, leg.attempt),
            tenant=leg.tenant,
            tx_id=leg.tx_id,
            action=leg.action,
            leg=leg.leg,
            attempt=leg.attempt,
            reason=step.reason,
            issued_at=now,
        )
        try:
            await self.producer.send_and_wait(
                self.topics.commands,
                value=command.model_dump_json().encode(),
                key=partition_key(leg.tenant, leg.tx_id),
            )
        except BaseException:
            async with self.pool.acquire() as conn:
                await store.release_review(conn, leg.op_key, leg.attempt)
            raise
        report.review_requested.append((leg.op_key, leg.attempt))
        log.warning(
            "%s %s %s attempt %d: %d lookups settled nothing; manual review requested"
            " (request %d of %d)",
            leg.tx_id,
            leg.action,
            leg.leg.value,
            leg.attempt,
            step.lookups,
            step.requests + 1,
            self.policy.review_requests,
        )

    async def _give_up(self, step: GiveUp, now: datetime, report: TickReport) -> None:
        leg = step.leg
        async with self.pool.acquire() as conn:
            if not await store.give_up(conn, leg.op_key, leg.attempt, step.requests, now):
                return
        report.given_up.append((leg.op_key, leg.attempt))
        # Once per leg, and counted in recon_reconciler_legs_given_up until it settles.
        log.error(
            "!!! %s %s %s attempt %d (tenant %s): %d review requests never took effect (a"
            " decider dead-lettering them?); the reconciler stops asking. A person must"
            " look: the leg is still in flight",
            leg.tx_id,
            leg.action,
            leg.leg.value,
            leg.attempt,
            leg.tenant,
            step.requests,
        )

    # --- the drift scan ------------------------------------------------------------

    async def scheduled_drift_scan(self) -> list[DriftDetected]:
        """The scheduler's scan: incremental, but every RECON_DRIFT_BACKSTOP_EVERY-th (the
        first of the process included) a backstop (reconcilers.drift_span.backstop_due)."""
        full = backstop_due(self.drift_scans, self.settings.reconciler.drift_backstop_every)
        self.drift_scans += 1
        return await self.drift_scan(full=full)

    async def drift_scan(
        self,
        effects_of: dict[Account, list[object]] | None = None,
        on_account: Callable[[Account], None] | None = None,
        *,
        full: bool = False,
    ) -> list[DriftDetected]:
        """Judge each provider account's effects and legs since its cursor (reconcilers.
        drift_span); produce what was not reported before; return what this scan found.
        `full`: a backstop, which judges every account's whole window as if it had no
        cursor (what it finds again was reported, and is filtered); over a whole listing it
        moves the account's cursor on like any scan, since it judged all an incremental span
        would have and more. `effects_of` replaces the accounts' lists (tests use it for
        drift a real provider cannot be made to show): such a scan judges the whole window
        and moves no cursor, the provider's own listing being unread.
        `on_account` is told of each account done (the CLI's progress)."""
        whole_window = full or effects_of is not None
        now = self.clock()
        window = timedelta(seconds=self.settings.reconciler.drift_window_s)
        grace = timedelta(seconds=self.settings.reconciler.drift_grace_s)
        found: list[DriftDetected] = []
        advanced: list[tuple[store.AccountKey, datetime]] = []
        holes: list[store.HoleWrite] = []
        async with self.pool.acquire() as conn:
            cursors = {} if whole_window else await store.drift_cursors(conn)
            held = {} if whole_window else await store.drift_holes(conn)
            accounts = (
                sorted(effects_of, key=str)
                if effects_of is not None
                else [account for account, _ in self.accounts.listed()]
            )
            for account in accounts:
                key = (account.provider, account.tenant)
                # Only an adapter that lists below an instant keeps a hole (a listing by
                # hand keeps nothing): any other's cut listing leaves its cursor, as before.
                keeps_holes = effects_of is None and can_list_until(self.accounts.adapters[account])
                # A hole kept while the account's adapter listed below an instant, which it
                # no longer does (its adapter or provider file changed): nothing would walk
                # it. Its span is judged as a cut listing's was before holes, from the
                # hole's start (the span above it judged again, the filter keeping it from
                # being reported twice), and a whole listing closes it.
                stranded = None if keeps_holes else held.get(key)
                start = cursors.get(key)
                if stranded is not None and start is not None:
                    start = min(start, stranded.since)
                judged = span(start, now, window, grace)
                listing = (
                    EffectListing(effects_of[account])
                    if effects_of is not None
                    else await self._listing(account, judged)
                )
                effects = self._effects(account, listing) if listing is not None else None
                left: Hole | None = None
                if listing is not None and effects is not None:
                    found += await self._judge(conn, account, effects, listing, judged, now)
                    if keeps_holes:
                        left = judged.left_out(listing.covered_from, grace)
                    cursor = judged.advanced(whole=listing.covered_from is None or keeps_holes)
                    # A backstop's whole listing judged every leg and effect of [window
                    # start, now - grace], a superset of the incremental span, so its cursor
                    # may move (forward only): else a fresh deployment's second scan, finding
                    # no cursor after the first (a backstop), read the whole window again.
                    # A cut one moves it too when what it left out is kept as a hole.
                    if cursor is not None and effects_of is None:
                        advanced.append((key, cursor))
                    if cursor is not None and stranded is not None:
                        holes.append(store.HoleWrite(key, stranded, None))
                        log.info(
                            "drift scan of %s: its hole [%s, %s) judged by a whole listing "
                            "from its start (the adapter no longer lists below an instant)",
                            account,
                            stranded.since.isoformat(),
                            stranded.below.isoformat(),
                        )
                if keeps_holes:
                    read = held.get(key)
                    rest = read
                    if not full:
                        below, rest = await self._hole(conn, account, read, now)
                        found += below
                    kept = rest if left is None else left.hull(rest)
                    # A backstop reads no hole: it only adds what its own cut left out.
                    if (kept != read and not full) or (full and left is not None):
                        holes.append(store.HoleWrite(key, read, kept, unread=full))
                if on_account is not None:
                    on_account(account)
        async with self.pool.acquire() as conn:
            # Claimed, produced, then remembered when the claim's transaction ends
            # (store.claiming_reports, the one judge with the webhook ingress): a crash
            # before its end reports a drift twice under one id (the drift table keeps
            # one row per id), never not at all.
            async with store.claiming_reports(
                conn, [(d.drift_id, d.kind.value, now) for d in found]
            ) as claimed:
                # Once an id: the span and the hole's listing can both find it.
                first: dict[str, DriftDetected] = {}
                for d in found:
                    first.setdefault(d.drift_id, d)
                new = [d for drift_id, d in first.items() if drift_id in claimed]
                await asyncio.gather(
                    *(
                        self.producer.send_and_wait(
                            self.topics.drift,
                            value=d.model_dump_json().encode(),
                            key=d.drift_id.encode(),
                        )
                        for d in new
                    )
                )
                crash_point(DRIFT_PRODUCED_CLAIM_OPEN)
            # Remembered, the cursors not moved: the next scan judges these spans again and
            # finds the same ids (events.drift.drift_id), all reported, so it produces none
            # of them again (tests/integration/test_drift_cursor.py).
            crash_point(DRIFT_BEFORE_CURSORS)
            # One transaction: a cursor moved past a cut listing without its hole would
            # mark a span judged that was not.
            async with conn.transaction():
                await store.advance_drift_cursors(conn, advanced, now)
                await store.write_drift_holes(conn, holes)
                if full and effects_of is None:
                    # A backstop knows every configured account: a cursor of any other
                    # is of an account removed, and would stay for ever. A crash before
                    # this leaves it to the next backstop.
                    forgotten = await store.forget_drift_cursors(
                        conn, [(a.provider, a.tenant) for a in accounts]
                    )
                    if forgotten:
                        log.info("drift: forgot %d cursor(s) of unconfigured accounts", forgotten)
        for d in new:
            log.warning("drift %s %s: %s", d.drift_id, d.kind.value, d.detail.get("message"))
        return found

    async def _judge(
        self,
        conn: asyncpg.Connection,
        account: Account,
        effects: list[Effect],
        listing: EffectListing,
        judged: Span,
        now: datetime,
    ) -> list[DriftDetected]:
        """One account's findings over its span: its listed effects against the legs its
        listing can judge (reconcilers.store.ledger): those under a listed key since the
        window's start, whose effects are compared, and those its span may prove absent."""
        config = self.settings.reconciler
        window_start = now - timedelta(seconds=config.drift_window_s)
        grace = timedelta(seconds=config.drift_grace_s)
        known = await store.known_keys(
            conn,
            sorted({e.idempotency_key for e in effects if e.created_at >= judged.judged_from}),
        )
        entries = await store.ledger(
            conn,
            window_start,
            account.provider,
            sorted({e.idempotency_key for e in effects}),
            first_covered(listing.covered_from, grace, judged.judged_from),
            account.tenant,
            judged.judged_below,
        )
        return compare(
            provider=account.provider,
            account=account.tenant,
            effects=effects,
            # The legs whose calls went to this account, by the rule that sent them:
            # another tenant's legs are not this account's to miss.
            ledger=[
                e for e in entries if self.accounts.account_of(e.tenant, e.provider) == account
            ],
            known_keys=known,
            now=now,
            window_start=judged.judged_from,
            grace=grace,
            covered_from=listing.covered_from,
            judged_below=judged.judged_below,
        )

    async def _hole(
        self, conn: asyncpg.Connection, account: Account, hole: Hole | None, now: datetime
    ) -> tuple[list[DriftDetected], Hole | None]:
        """Judge the account's hole from its top down, one listing (a page cap) of it: what
        that found, and what is left of the hole after: None when that listing was whole
        (closed), the hole as it was when the provider could not answer or listed something
        unreadable, the part below the listing's cut otherwise. A hole no longer in the
        window is dropped."""
        if hole is None:
            return [], None
        config = self.settings.reconciler
        below = hole_span(
            hole,
            now,
            timedelta(seconds=config.drift_window_s),
            timedelta(seconds=config.drift_grace_s),
        )
        if below is None:
            return [], None
        listing = await self._listing(account, below)
        effects = self._effects(account, listing) if listing is not None else None
        if listing is None or effects is None:
            return [], hole
        found = await self._judge(conn, account, effects, listing, below, now)
        grace = timedelta(seconds=config.drift_grace_s)
        newest = max((e.created_at for e in effects), default=None)
        rest = below.left_out(listing.covered_from, grace, newest)
        if below.gives_up(listing.covered_from, grace):
            # Counted, not only logged: legs given up are never judged by the walk again
            # (docs/webhooks-reviews-drift.md), and the cut alert is the only other sign.
            labelled(DRIFT_GRACES_GIVEN_UP, account.provider).inc()
            log.warning(
                "drift scan of %s: more than a page cap of effects within two graces of %s;"
                " legs dispatched from %s to it are given up (not judged for a missing"
                " effect); the effects below the cut are listed by the next scans",
                account,
                hole.below.isoformat(),
                (hole.below if rest is None else rest.below).isoformat(),
            )
        if rest is not None and not below.gives_up(listing.covered_from, grace):
            lifted, rest = await self._hole_bottom(conn, account, rest, below, listing, now)
            found += lifted
        return found, rest

    async def _hole_bottom(
        self,
        conn: asyncpg.Connection,
        account: Account,
        rest: Hole,
        top: Span,
        listing: EffectListing,
        now: datetime,
    ) -> tuple[list[DriftDetected], Hole | None]:
        """List the hole left below the top's cut listing from its bottom up, one slice
        after another (reconcilers.drift_span.bottom_slice, the first sized by the top
        listing's rate), up to BOTTOM_SLICES a scan: what they found, and the
        hole above the last whole one. A cut slice lifts nothing (its effects are judged
        all the same, as any cut listing's) and sizes the next from the same bottom by its
        own rate; an unavailable or unreadable one ends it."""
        config = self.settings.reconciler
        window = timedelta(seconds=config.drift_window_s)
        grace = timedelta(seconds=config.drift_grace_s)
        assert top.ask_until is not None and listing.covered_from is not None
        # NOTHING_COVERED (an order unknown) spans less than nothing: no rate, no slice.
        spanned = top.ask_until - listing.covered_from
        held = listed = len(listing.effects)
        since = max(rest.since, now - window)
        found: list[DriftDetected] = []
        for _ in range(BOTTOM_SLICES):
            piece = bottom_slice(since, rest.below, spanned, listed, held, grace)
            judged = None if piece is None else hole_span(piece, now, window, grace)
            if piece is None or judged is None or judged.ask_until is None:
                break
            sliced = await self._listing(account, judged)
            effects = self._effects(account, sliced) if sliced is not None else None
            if sliced is None or effects is None:
                break
            found += await self._judge(conn, account, effects, sliced, judged, now)
            listed = len(effects)
            if sliced.covered_from is None:
                since = piece.below
                spanned = judged.ask_until - judged.ask_since
                continue
            # Cut: the bottom is busier than the rate the slice was sized by; the next
            # one, from the same bottom, is sized by this one's own.
            spanned = judged.ask_until - sliced.covered_from
        if since <= max(rest.since, now - window):
            return found, rest
        return found, Hole(since, rest.below) if since < rest.below else None

    async def _listing(self, account: Account, judged: Span) -> EffectListing | None:
        """The account's effects of the span `judged` (from a grace before it, for the
        clocks' difference; for a hole, to a grace past it); None when the provider could
        not answer (counted in recon_drift_listings as `unavailable`)."""
        try:
            return await listing_of(
                self.accounts.adapters[account], judged.ask_since, judged.ask_until
            )
        except ListingUnavailable as error:
            labelled(DRIFT_LISTINGS, account.provider, "unavailable").inc()
            log.warning("drift scan skipped %s: %s", account, error)
            return None

    def _effects(self, account: Account, listing: EffectListing) -> list[Effect] | None:
        """The listing's effects, its outcome counted in recon_drift_listings; None when an
        item is not an effect: that account is not compared (a missing key or time would
        be a guess: an effect without intent, or one outside the window), the others are."""
        try:
            effects = [effect_from_json(item) for item in listing.effects]
        except UnreadableEffect as error:
            labelled(DRIFT_LISTINGS, account.provider, "unreadable").inc()
            log.warning("drift scan skipped %s: its listing holds %s", account, error)
            return None
        if listing.covered_from is None:
            labelled(DRIFT_LISTINGS, account.provider, "whole").inc()
        else:
            labelled(DRIFT_LISTINGS, account.provider, "cut").inc()
            log.warning(
                "drift scan of %s: the listing was cut at %d effects (a page cap); legs"
                " dispatched before %s are not judged for a missing effect by this scan"
                " (later scans list below it where the adapter can: a hole)",
                account,
                len(listing.effects),
                listing.covered_from.isoformat(),
            )
        return effects

    # --- retention -----------------------------------------------------------------

    async def purge(self) -> dict[str, int]:
        config = self.settings.reconciler
        async with self.pool.acquire() as conn:
            deleted = await store.purge(
                conn,
                self.clock(),
                retention=timedelta(seconds=config.retention_s),
                drift_window=timedelta(seconds=config.drift_window_s),
            )
        if any(deleted.values()):
            log.info("purged %s", ", ".join(f"{n} from {t}" for t, n in deleted.items()))
        return deleted


@asynccontextmanager
async def open_reconciler(
    settings: Settings, stop: asyncio.Event | None = None
) -> AsyncIterator[Reconciler]:
    """Topics, a Postgres pool, a producer and the providers' adapters: what the
    process and the CLI's one-off scan both need. Set `stop` while the topics are set up,
    the pool waits for Postgres or the producer starts and all are given up:
    StoppedStarting is raised instead of a reconciler yielded. It was yielded with its
    producer unstarted, a reconciler whose every send failed, for any caller that did not
    check `stop` itself before using it."""
    if not await ensure_recon_topics(settings, stop=stop):
        raise StoppedStarting("during topic set-up")
    # Each closed however a later step ends, the producer's own failed start included
    # (services.closing).
    async with AsyncExitStack() as stack:
        pool = await open_pool(settings.database_url, stop=stop, min_size=1, max_size=8)
        stack.push_async_callback(pool.close)
        producer = stopped_with(stack, acked_producer(settings, "reconciler-producer"))
        if not await start_kafka_client(producer, "reconciler producer", stop):
            raise StoppedStarting("while its producer started")
        http = await stack.enter_async_context(
            ProviderHttp(settings.provider_timeout_s, connect_s=2.0)
        )
        yield Reconciler(settings, pool, producer, build_accounts(http, settings))


async def run_reconciler(settings: Settings, stop: asyncio.Event) -> None:
    config = settings.reconciler
    # Every run of every job is logged at INFO by APScheduler: noise at a 2 s interval.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    async with AsyncExitStack() as stack:
        try:
            reconciler = await stack.enter_async_context(open_reconciler(settings, stop))
        except StoppedStarting as stopped:
            log.info("reconciler stopped %s: no job runs, nothing is produced", stopped)
            return
        scheduler = AsyncIOScheduler(timezone=UTC)
        now = datetime.now(UTC)
        _every(scheduler, "pull tick", reconciler.tick, config.interval_s, now)
        _every(
            scheduler,
            "drift scan",
            reconciler.scheduled_drift_scan,
            config.drift_interval_s,
            now + timedelta(seconds=min(5.0, config.drift_interval_s)),
        )
        # Several reconcilers may purge at once: each DELETE is idempotent.
        _every(
            scheduler,
            "purge",
            reconciler.purge,
            config.purge_interval_s,
            now + timedelta(seconds=min(30.0, config.purge_interval_s)),
        )
        _every(
            scheduler,
            "gauge refresh",
            functools.partial(refresh_gauges, reconciler.pool),
            min(REFRESH_S, config.interval_s),
            now,
        )
        scheduler.start()
        log.info(
            "reconciler up: pull every %ss (stuck after %ss, %d lookups), drift every %ss",
            config.interval_s,
            config.after_s,
            config.budget,
            config.drift_interval_s,
        )
        try:
            await stop.wait()
        finally:
            scheduler.shutdown(wait=False)


def _every(
    scheduler: AsyncIOScheduler,
    name: str,
    job: Callable[[], Awaitable[object]],
    period_s: float,
    first: datetime,
) -> None:
    async def run() -> None:
        try:
            await job()
        except asyncio.CancelledError:
            # The scheduler's shutdown cancels a run in flight when the process stops;
            # re-raised, APScheduler would log it as an ERROR with its traceback at every
            # stop that met one (the pull tick runs every 2 s). A run cut short leaves what
            # a crash would, which every job survives: the drift scan produces before it
            # remembers, a tick's observations carry their ids.
            log.info("%s cut short by the stop", name)
        except Exception:
            log.exception("%s failed; the next one retries", name)

    # misfire_grace_time: a run delayed (a busy loop, a slow tick) by up to one period still
    # runs; later than that it is skipped, and coalesce folds a backlog into one. One
    # instance at a time: a slow run is never overlapped by the next.
    scheduler.add_job(
        run,
        "interval",
        id=name,
        seconds=period_s,
        coalesce=True,
        max_instances=1,
        misfire_grace_time=max(1, int(period_s)),
        next_run_time=first,
    )
