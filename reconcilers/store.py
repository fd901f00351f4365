"""The reconcilers' Postgres side: stuck legs and recon's ledger from the projections
(read only), and the reconciler's own bookkeeping.

Claims are compare-and-set updates on `reconciler_leases`: lookup n of (op_key, attempt)
is claimed by inserting the row (n = 1) or by moving `lookups` from n - 1 to n, and only
one transaction can do either. Two reconciler processes, or a tick that fires twice,
planned from the same snapshot, so they propose the same n; one claim wins and the
other finds nothing to update. A claim is taken before the lookup: a crash after it
costs one lookup of the budget, never a second report of lookup n (and a repeated
report would carry the same message id, which the decider drops).

The review request is claimed the same way, but its claim expires (the planner's
`review_retry`, doubling per request): a crash between the claim and the send would
otherwise leave the leg `unknown` forever, never looked up again and never reviewed. Each
claim moves `review_requests` from n to n + 1, and past the planner's limit the lease is
marked given up (`given_up_at`), once.
"""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from events import legs
from events.definition import Leg, OpStatus, ReviewState
from events.legs import LegStatus
from projections.held_open import held_open
from projections.operation_row import either_leg_in, legs_of
from reconcilers.drift import LedgerEntry
from reconcilers.drift_span import Hole
from reconcilers.pull import Candidate, FirstRequest, Lease, LeaseKey, maybe_sent

IN_FLIGHT = tuple(status.value for status in legs.IN_FLIGHT)

# The undo's operation name is not a column of `operations`; its dispatch event holds it.
_CANDIDATES = """
SELECT tenant, tx_id, action, 'forward' AS leg, op_key, attempts AS attempt, provider,
       operation, updated_at, state
  FROM operations WHERE state = ANY($1::text[])
UNION ALL
SELECT o.tenant, o.tx_id, o.action, 'compensation', o.comp_op_key, o.comp_attempts, o.provider,
       coalesce((SELECT e.data->>'operation' FROM events e
                  WHERE e.tenant = o.tenant AND e.tx_id = o.tx_id
                    AND e.type = 'OperationDispatched' AND e.data->>'op_key' = o.comp_op_key
                  ORDER BY e.seq DESC LIMIT 1), o.operation),
       o.updated_at, o.comp_state
  FROM operations o WHERE o.comp_state = ANY($1::text[]) AND o.comp_op_key IS NOT NULL
"""


async def in_flight_legs(conn: asyncpg.Connection) -> list[Candidate]:
    rows = await conn.fetch(_CANDIDATES, list(IN_FLIGHT))
    held = await _held(conn)
    begun = await _begun(conn)
    rows = [
        row
        for row in rows
        if (row["tenant"], row["op_key"], row["attempt"]) not in held
        and maybe_sent(
            row["state"], (row["tenant"], row["op_key"], row["leg"], row["attempt"]) in begun
        )
    ]
    first = await _first_requests(conn, [(r["tenant"], r["tx_id"], r["op_key"]) for r in rows])
    return [
        Candidate(
            tenant=row["tenant"],
            tx_id=row["tx_id"],
            action=row["action"],
            leg=Leg(row["leg"]),
            op_key=row["op_key"],
            attempt=row["attempt"],
            provider=row["provider"],
            operation=row["operation"],
            since=row["updated_at"],
            first=first.get((row["tenant"], row["op_key"])),
        )
        for row in rows
    ]


# Each key's first dispatch on the log (every attempt sends its first's payload), and the
# earliest of its dispatches: the first send under the key followed one of them.
_FIRST_DISPATCHES = """
SELECT DISTINCT ON (e.tenant, e.data->>'op_key')
       e.tenant, e.data->>'op_key' AS op_key, e.data->'payload' AS payload,
       min(e.occurred_at) OVER (PARTITION BY e.tenant, e.data->>'op_key') AS at
  FROM events e
  JOIN unnest($1::text[], $2::text[], $3::text[]) AS k (tenant, tx_id, op_key)
    ON e.tenant = k.tenant AND e.tx_id = k.tx_id AND e.data->>'op_key' = k.op_key
 WHERE e.type = 'OperationDispatched'
 ORDER BY e.tenant, e.data->>'op_key', e.seq
"""


async def _first_requests(
    conn: asyncpg.Connection, keys: list[tuple[str, str, str]]
) -> dict[tuple[str, str], FirstRequest]:
    """The first request under each (tenant, tx_id, op_key), by (tenant, op_key). Its time
    is the earliest dispatch of the key, or the earliest call begun under it when that is
    earlier (another clock's view of the same send): whichever attempt sent first, its
    dispatch and its begun row came before the send. A begun row alone is no bound: the
    upgrade that created `calls_begun` wrote rows for calls made before it."""
    if not keys:
        return {}
    rows = await conn.fetch(
        _FIRST_DISPATCHES, [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]
    )
    begun = {
        (r["tenant"], r["op_key"]): r["at"]
        for r in await conn.fetch(
            "SELECT c.tenant, c.op_key, min(c.begun_at) AS at FROM calls_begun c"
            " JOIN unnest($1::text[], $2::text[]) AS k (tenant, op_key)"
            " ON c.tenant = k.tenant AND c.op_key = k.op_key GROUP BY 1, 2",
            [k[0] for k in keys],
            [k[2] for k in keys],
        )
    }
    first = {}
    for row in rows:
        key = (row["tenant"], row["op_key"])
        at = min(row["at"], begun.get(key, row["at"]))
        first[key] = FirstRequest(json.loads(row["payload"]), at)
    return first


# The begun calls of the legs in state $1 (`dispatched`).
BEGUN = (
    "SELECT c.tenant, c.op_key, c.leg, c.attempt FROM calls_begun c"
    " JOIN operations o ON o.tenant = c.tenant"
    " AND c.op_key IN (o.op_key, o.comp_op_key)"
    f" WHERE {either_leg_in('$1', 'o')}"
)


async def _begun(conn: asyncpg.Connection) -> set[tuple[str, str, str, int]]:
    """The calls begun of legs still `dispatched` (`calls_begun`, services/dispatcher/
    calls_begun.py): one without its row is not looked up (reconcilers.pull.maybe_sent)."""
    rows = await conn.fetch(BEGUN, OpStatus.DISPATCHED.value)
    return {(r["tenant"], r["op_key"], r["leg"], r["attempt"]) for r in rows}


async def _held(conn: asyncpg.Connection) -> set[tuple[str, str, int]]:
    """Dispatches a kill switch holds (`held_dispatches`, services/migrations):
    not stuck, since no dispatcher has sent them, so not looked up. Their lookups would find
    nothing and, past the budget, send a leg that is only waiting for a release to review."""
    rows = await conn.fetch("SELECT tenant, op_key, attempt FROM held_dispatches")
    return {(r["tenant"], r["op_key"], r["attempt"]) for r in rows}


async def leases_for(conn: asyncpg.Connection, keys: list[LeaseKey]) -> dict[LeaseKey, Lease]:
    if not keys:
        return {}
    rows = await conn.fetch(
        "SELECT op_key, attempt, lookups, next_at, review_requested_at, review_requests,"
        " given_up_at FROM reconciler_leases"
        " WHERE (op_key, attempt) IN (SELECT * FROM unnest($1::text[], $2::int[]))",
        [k for k, _ in keys],
        [a for _, a in keys],
    )
    return {
        (row["op_key"], row["attempt"]): Lease(
            op_key=row["op_key"],
            attempt=row["attempt"],
            lookups=row["lookups"],
            next_at=row["next_at"],
            review_requested=row["review_requested_at"] is not None,
            review_requested_at=row["review_requested_at"],
            review_requests=row["review_requests"],
            given_up=row["given_up_at"] is not None,
        )
        for row in rows
    }


async def claim_lookup(
    conn: asyncpg.Connection, op_key: str, attempt: int, n: int, next_at: datetime, now: datetime
) -> bool:
    """Take lookup n of (op_key, attempt); False if someone else already took it."""
    if n == 1:
        row = await conn.fetchrow(
            "INSERT INTO reconciler_leases (op_key, attempt, lookups, next_at, updated_at)"
            " VALUES ($1, $2, 1, $3, $4) ON CONFLICT (op_key, attempt) DO NOTHING RETURNING 1",
            op_key,
            attempt,
            next_at,
            now,
        )
    else:
        row = await conn.fetchrow(
            "UPDATE reconciler_leases SET lookups = $3, next_at = $4, updated_at = $5"
            " WHERE op_key = $1 AND attempt = $2 AND lookups = $3 - 1 AND next_at <= $5"
            " AND review_requested_at IS NULL RETURNING 1",
            op_key,
            attempt,
            n,
            next_at,
            now,
        )
    return row is not None


async def claim_review(
    conn: asyncpg.Connection,
    op_key: str,
    attempt: int,
    lookups: int,
    requests: int,
    now: datetime,
    stale_before: datetime,
) -> bool:
    """Take review request number `requests` + 1 of (op_key, attempt): the first time, or
    again once an earlier claim is older than `stale_before` (its holder may have died
    before sending; the claim expires instead of blocking the leg from review forever)."""
    row = await conn.fetchrow(
        "UPDATE reconciler_leases SET review_requested_at = $4, updated_at = $4,"
        " review_requests = $6 + 1"
        " WHERE op_key = $1 AND attempt = $2 AND lookups = $3 AND review_requests = $6"
        " AND given_up_at IS NULL"
        " AND (review_requested_at IS NULL OR review_requested_at <= $5)"
        " RETURNING 1",
        op_key,
        attempt,
        lookups,
        now,
        stale_before,
        requests,
    )
    return row is not None


async def release_review(conn: asyncpg.Connection, op_key: str, attempt: int) -> None:
    """The review request did not reach Kafka: let the next tick ask again (it was not
    one of the requests that count)."""
    await conn.execute(
        "UPDATE reconciler_leases SET review_requested_at = NULL,"
        " review_requests = greatest(review_requests - 1, 0)"
        " WHERE op_key = $1 AND attempt = $2",
        op_key,
        attempt,
    )


async def give_up(
    conn: asyncpg.Connection, op_key: str, attempt: int, requests: int, now: datetime
) -> bool:
    """Mark the leg given up after `requests` review requests; False if it already was."""
    row = await conn.fetchrow(
        "UPDATE reconciler_leases SET given_up_at = $4, updated_at = $4"
        " WHERE op_key = $1 AND attempt = $2 AND review_requests = $3 AND given_up_at IS NULL"
        " RETURNING 1",
        op_key,
        attempt,
        requests,
        now,
    )
    return row is not None


# A given-up lease of a leg that settled since (a person resolved it) is history, not an
# alarm: only those whose leg is still in flight are counted.
_GIVEN_UP_IN_FLIGHT = """
SELECT count(*) FROM reconciler_leases l
 WHERE l.given_up_at IS NOT NULL
   AND (EXISTS (SELECT 1 FROM operations o WHERE o.op_key = l.op_key
                   AND o.attempts = l.attempt AND o.state = ANY($1::text[]))
        OR EXISTS (SELECT 1 FROM operations o WHERE o.comp_op_key = l.op_key
                   AND o.comp_attempts = l.attempt AND o.comp_state = ANY($1::text[])))
"""


async def given_up_in_flight(conn: asyncpg.Connection) -> int:
    """Legs still in flight whose review requests the reconciler stopped sending."""
    return int(await conn.fetchval(_GIVEN_UP_IN_FLIGHT, list(IN_FLIGHT)) or 0)


async def record_outcome(conn: asyncpg.Connection, op_key: str, attempt: int, outcome: str) -> None:
    await conn.execute(
        "UPDATE reconciler_leases SET last_outcome = $3 WHERE op_key = $1 AND attempt = $2",
        op_key,
        attempt,
        outcome,
    )


# --- drift ---------------------------------------------------------------------------

# The legs recon dispatched to provider $2 (for tenant $5 alone when the listing is that
# tenant's own account's) since $1 that a scan of its listing can judge,
# with what each sent and whether it is confirmed: those under a key the listing holds ($3),
# whose effects it compares, and those dispatched from $4 on (and before $6, if given: a
# hole's span, reconcilers.drift_span.hole_span, whose legs above were judged), whose
# missing effect it may prove (reconcilers.drift.first_covered). Not the whole window: that
# is every leg of the last day, loaded and compared at every scan (3.5 s of CPU and 280 MB
# a scan with 136,000 legs in the window). A forward leg that was later compensated still
# left its effect.
_LEDGER = """
SELECT DISTINCT ON (e.data->>'op_key')
       e.tenant, e.tx_id, e.data->>'action' AS action, e.data->>'leg' AS leg,
       e.data->>'op_key' AS op_key, e.data->>'provider' AS provider,
       e.data->>'operation' AS operation, e.data->'payload' AS payload,
       e.occurred_at AS dispatched_at, o.state, o.attempts, o.comp_state, o.comp_attempts,
       o.open_review_id
  FROM events e
  JOIN operations o ON o.tenant = e.tenant AND o.tx_id = e.tx_id
                   AND o.action = e.data->>'action'
 WHERE e.type = 'OperationDispatched' AND e.occurred_at >= $1
   AND e.data->>'provider' = $2 AND ($5::text IS NULL OR e.tenant = $5)
   AND (e.data->>'op_key' = ANY($3::text[])
        OR (e.occurred_at >= $4 AND ($6::timestamptz IS NULL OR e.occurred_at < $6)))
 ORDER BY e.data->>'op_key', e.seq DESC
"""


async def ledger(
    conn: asyncpg.Connection,
    since: datetime,
    provider: str,
    listed_keys: list[str],
    absent_from: datetime,
    tenant: str | None = None,
    absent_below: datetime | None = None,
) -> list[LedgerEntry]:
    """The legs dispatched to `provider` (by `tenant` alone if given: a tenant's own
    account) since `since` that a listing holding `listed_keys` can judge: under one of
    those keys, or dispatched from `absent_from` on (and before `absent_below`, if given:
    a hole's span holds a page cap of the burst, not every leg since)."""
    rows = await conn.fetch(
        _LEDGER, since, provider, listed_keys, absent_from, tenant, absent_below
    )
    entries = []
    for row in rows:
        leg = Leg(row["leg"])
        # The leg's own state, not the operation's: an operation whose undo is in review
        # shows manual_review, and its forward effect was confirmed all the same.
        forward, compensation = legs_of(row)
        held = forward if leg is Leg.FORWARD else compensation
        status = held.status if held is not None else None
        entries.append(
            LedgerEntry(
                tenant=row["tenant"],
                tx_id=row["tx_id"],
                action=row["action"],
                leg=leg,
                op_key=row["op_key"],
                provider=row["provider"],
                operation=row["operation"],
                payload=json.loads(row["payload"]),
                dispatched_at=row["dispatched_at"],
                confirmed=status is LegStatus.CONFIRMED,
                # Refused for good, or resolved not_applied: recon holds that it left no
                # effect. An undo never ends failed (reconcilers.drift.LedgerEntry).
                failed=leg is Leg.FORWARD and status is LegStatus.FAILED,
            )
        )
    return entries


# The projections, and the intake's own intent keys: the intake writes every key an intent
# will use (compensation keys included, `intent_keys`) before the transaction reaches Kafka,
# so a key is known here even while the projector is slow or stopped.
_KNOWN_KEYS = """
SELECT op_key AS key FROM operations WHERE op_key = ANY($1::text[])
UNION SELECT comp_op_key FROM operations WHERE comp_op_key = ANY($1::text[])
UNION SELECT data->>'op_key' FROM events
 WHERE type = 'OperationDispatched' AND data->>'op_key' = ANY($1::text[])
UNION SELECT key FROM intent_keys WHERE key = ANY($1::text[])
"""


async def known_keys(conn: asyncpg.Connection, keys: list[str]) -> set[str]:
    """Which of these idempotency keys recon ever sent (or will send) under any leg."""
    if not keys:
        return set()
    rows = await conn.fetch(_KNOWN_KEYS, keys)
    return {row["key"] for row in rows}


# How long a drift claim's transaction may sit idle, waiting on its holder (the produce of
# what it claimed), before Postgres ends the holder's session and so the claim. A holder
# that vanished without closing its connection (a host lost, a network cut between it and
# Postgres, a process frozen: its socket stays open, and the kernel's keepalive notices a
# dead peer after about two hours) would otherwise hold the row's lock that long, and every
# other reporter of the id waits at it: the scan's whole batch, and the ingress's claims,
# which take the DRIFT_CLAIMS slots until every drift webhook is answered 503. Twice the
# ingress's delivery bound (services.intake.produce.DELIVERY_BOUND_S, 30 s), past the
# scan's produce too (aiokafka's 40 s request timeout): only a holder that stopped is cut.
CLAIM_IDLE_BOUND_S = 60.0


@asynccontextmanager
async def claiming_reports(
    conn: asyncpg.Connection,
    reported: list[tuple[str, str, datetime]],
    idle_bound_s: float = CLAIM_IDLE_BOUND_S,
) -> AsyncIterator[set[str]]:
    """The one judge of "already reported" for both reporters of drift (the scan and the
    webhook ingress): yields which of these (drift id, kind, when) this caller is to
    report, the others having been reported; the caller produces those inside the block,
    and they are remembered as reported when it ends (an error in it remembers nothing).

    The claim is the row itself, inserted in a transaction that stays open while the
    caller produces: a second reporter of the same id at the same instant waits at the
    row (Postgres holds an insert of a key another open transaction inserted until that
    one ends) and then finds it reported, so the two never both report it. Until stop 50
    each asked first and remembered after producing, and two that asked at once both
    produced. A crash before the block ends rolls the row back: the next scan or the
    provider's retry reports it (twice under one id if the crash came after the produce,
    never not at all, as before). The ids are written in id order, so two reporters of
    several ids wait for each other, never deadlock. A holder that stops (its host lost,
    frozen) loses its claim after `idle_bound_s` idle (CLAIM_IDLE_BOUND_S, through
    projections.held_open, the rule of every transaction held across a round trip): the
    same as a crash before the commit, the other reporter reports it."""
    ids = sorted({drift_id: (kind, at) for drift_id, kind, at in reported}.items())
    async with held_open(conn, idle_bound_s):
        rows = await conn.fetch(
            "INSERT INTO reconciler_drift_reported (drift_id, kind, reported_at)"
            " SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[]) ORDER BY 1"
            " ON CONFLICT (drift_id) DO NOTHING RETURNING drift_id",
            [drift_id for drift_id, _ in ids],
            [kind for _, (kind, _) in ids],
            [at for _, (_, at) in ids],
        )
        yield {row["drift_id"] for row in rows}


# A provider account by its provider and the tenant whose own account it is (None: the
# shared account), as services.providers.accounts.Account names it.
AccountKey = tuple[str, str | None]


async def drift_cursors(conn: asyncpg.Connection) -> dict[AccountKey, datetime]:
    """Each account's drift cursor (reconcilers.drift_span): the instant up to which its
    effects and legs were judged. An account without one was never scanned whole."""
    rows = await conn.fetch("SELECT provider, account, judged_to FROM reconciler_drift_cursors")
    return {(r["provider"], r["account"] or None): r["judged_to"] for r in rows}


async def drift_holes(conn: asyncpg.Connection) -> dict[AccountKey, Hole]:
    """Each account's hole (reconcilers.drift_span.Hole): what a cut listing left unjudged
    under its cursor. An account without one has none."""
    rows = await conn.fetch(
        "SELECT provider, account, hole_from, hole_to FROM reconciler_drift_cursors"
        " WHERE hole_from IS NOT NULL"
    )
    return {(r["provider"], r["account"] or None): Hole(r["hole_from"], r["hole_to"]) for r in rows}


@dataclass(frozen=True)
class HoleWrite:
    """One account's hole after a scan (`hole`, None: closed or none) and the hole it read
    before (`read`; `unread` when it read none: a backstop, which reads no cursor)."""

    account: AccountKey
    read: Hole | None
    hole: Hole | None
    unread: bool = False


async def write_drift_holes(conn: asyncpg.Connection, written: list[HoleWrite]) -> None:
    """Write each account's hole, in the transaction that moves its cursor (a cursor moved
    past a hole not written would mark a span judged that was not). As the scan wrote it
    when the row still holds the hole the scan read (nobody wrote one since); otherwise, or
    when it read none, the hull of both (Hole.hull): two scans at once (two reconcilers, or
    the CLI's beside the process's) each closed or shrank only the hole they read, and a
    larger hole only costs judging again, never a span left unjudged. The row exists: its
    cursor was written first (advance_drift_cursors) or it held the hole read."""
    # In an UPDATE every expression reads the row as it was before it: both columns
    # compare the hole held with the one read.
    same = (
        "NOT $7::boolean AND c.hole_from IS NOT DISTINCT FROM $3::timestamptz"
        " AND c.hole_to IS NOT DISTINCT FROM $4::timestamptz"
    )
    await conn.executemany(
        "UPDATE reconciler_drift_cursors c SET"
        f" hole_from = CASE WHEN {same} THEN $5 ELSE least(c.hole_from, $5) END,"
        f" hole_to = CASE WHEN {same} THEN $6 ELSE greatest(c.hole_to, $6) END"
        " WHERE c.provider = $1 AND c.account = $2",
        [
            (
                provider,
                tenant or "",
                None if w.read is None else w.read.since,
                None if w.read is None else w.read.below,
                None if w.hole is None else w.hole.since,
                None if w.hole is None else w.hole.below,
                w.unread,
            )
            for w in written
            for provider, tenant in [w.account]
        ],
    )


async def advance_drift_cursors(
    conn: asyncpg.Connection, advanced: list[tuple[AccountKey, datetime]], now: datetime
) -> None:
    """Move each account's cursor forward to its instant, never back: two scans that ran
    at once (two reconcilers, or the CLI's beside the process's) judged overlapping spans,
    and the later cursor is the one both spans cover."""
    await conn.executemany(
        "INSERT INTO reconciler_drift_cursors (provider, account, judged_to, updated_at)"
        " VALUES ($1, $2, $3, $4) ON CONFLICT (provider, account) DO UPDATE"
        " SET judged_to = greatest(reconciler_drift_cursors.judged_to, excluded.judged_to),"
        " updated_at = excluded.updated_at",
        [(provider, tenant or "", at, now) for (provider, tenant), at in advanced],
    )


async def forget_drift_cursors(conn: asyncpg.Connection, known: list[AccountKey]) -> int:
    """Delete the cursors of every account but `known` (the accounts a backstop scanned:
    those configured now), so a removed account's row does not stay for ever. Safe to
    lose: an account added again later has no cursor, so its next scan judges its whole
    window, and what it finds again was reported (reconciler_drift_reported keeps ids for
    the window and more) and is not produced twice. Returns how many were deleted."""
    tag: str = await conn.execute(
        "DELETE FROM reconciler_drift_cursors c WHERE NOT EXISTS ("
        " SELECT 1 FROM unnest($1::text[], $2::text[]) AS k (provider, account)"
        " WHERE (k.provider, k.account) = (c.provider, c.account))",
        [provider for provider, _ in known],
        [tenant or "" for _, tenant in known],
    )
    return int(tag.split()[-1])


# --- retention -------------------------------------------------------------------------

PURGE_BATCH = 5000  # rows per DELETE, so a large backlog never holds long locks

# A lease is needed while its leg is in flight (it counts the lookups against the budget
# and holds the review claim); once the leg has settled, only for a look at what happened.
_PURGE_LEASES = """
DELETE FROM reconciler_leases WHERE ctid IN (
  SELECT l.ctid FROM reconciler_leases l
   WHERE l.updated_at < $1
     AND NOT EXISTS (SELECT 1 FROM operations o
                      WHERE o.op_key = l.op_key AND o.state = ANY($2::text[]))
     AND NOT EXISTS (SELECT 1 FROM operations o
                      WHERE o.comp_op_key = l.op_key AND o.comp_state = ANY($2::text[]))
   LIMIT $3)
"""
# A call's "begun" row (services/dispatcher/calls_begun.py) tells a redelivery of a leg in
# flight from a first send; a leg that settled is never sent again (the dispatcher asks the
# projection first), so its rows are only history.
_PURGE_CALLS_BEGUN = """
DELETE FROM calls_begun WHERE ctid IN (
  SELECT c.ctid FROM calls_begun c
   WHERE c.begun_at < $1
     AND NOT EXISTS (SELECT 1 FROM operations o
                      WHERE o.tenant = c.tenant AND o.op_key = c.op_key
                        AND o.state = ANY($2::text[]))
     AND NOT EXISTS (SELECT 1 FROM operations o
                      WHERE o.tenant = c.tenant AND o.comp_op_key = c.op_key
                        AND o.comp_state = ANY($2::text[]))
   LIMIT $3)
"""
# A drift id is found again only while its subject (the effect, or the dispatch) is inside
# the scan's window; `before` is older than that, plus the retention margin.
_PURGE_DRIFT_REPORTED = """
DELETE FROM reconciler_drift_reported WHERE ctid IN (
  SELECT ctid FROM reconciler_drift_reported WHERE reported_at < $1 LIMIT $2)
"""
# The intake's guard for one resolution per review is needed while the review is open; once
# the projection shows it resolved, the intake answers 409 from `reviews` itself, and the
# resolution (who, what, note) stays in `reviews` and on recon.events.
_PURGE_REVIEW_RESOLUTIONS = """
DELETE FROM review_resolutions WHERE ctid IN (
  SELECT rr.ctid FROM review_resolutions rr
   WHERE rr.created_at < $1
     AND EXISTS (SELECT 1 FROM reviews r WHERE r.id = rr.review_id AND r.state = $2)
   LIMIT $3)
"""


async def _delete_in_batches(conn: asyncpg.Connection, sql: str, *args: object) -> int:
    total = 0
    while True:
        status = await conn.execute(sql, *args, PURGE_BATCH)
        deleted = int(status.split()[-1])
        total += deleted
        if deleted < PURGE_BATCH:
            return total


async def purge(
    conn: asyncpg.Connection, now: datetime, retention: timedelta, drift_window: timedelta
) -> dict[str, int]:
    """Delete the reconciler's bookkeeping nobody needs any more; returns rows per table.
    Never touched: `events` (the audit log), `intents` (the intake's 409 for a resubmitted
    tx_id with another body rests on it) and `webhook_deliveries` (the intake purges it
    past its dedupe horizon)."""
    return {
        "reconciler_leases": await _delete_in_batches(
            conn, _PURGE_LEASES, now - retention, list(IN_FLIGHT)
        ),
        "reconciler_drift_reported": await _delete_in_batches(
            conn, _PURGE_DRIFT_REPORTED, now - drift_window - retention
        ),
        "review_resolutions": await _delete_in_batches(
            conn, _PURGE_REVIEW_RESOLUTIONS, now - retention, ReviewState.RESOLVED.value
        ),
        "calls_begun": await _delete_in_batches(
            conn, _PURGE_CALLS_BEGUN, now - retention, list(IN_FLIGHT)
        ),
    }
