"""The durable "about to call" record (`calls_begun`, services/migrations).

A dispatcher writes one row per (tenant, op_key, leg, attempt) right before it calls the
provider, after every gate and precondition. Three questions are answered by it, exactly:

- Is this dispatch a redelivery? Only if a row exists: some dispatcher (a dead owner, a
  resume that lost its lease, this one before a rewind) may have made the call. Without a
  row no call was ever made under this attempt, whatever the offset says, so a dispatch read
  again after a rebalance, or a held dispatch claimed again, is a first send when nobody
  got as far as the provider, and a looked-up-first redelivery when somebody did. Asked by
  `was_begun` when a lookup or a precondition comes before the begin, and otherwise by
  `begin` itself (`existed`), which then writes nothing new.
- Does a kill switch stop this call? The row is written by the statement that checks the
  engaged switches (`begin`; `begin_many` for the calls a host begins at once, each judged
  as alone), so a switch whose 201 was answered before the statement ran is seen: from
  the 201 on, no new call for its scope is begun. A call begun before it is in flight, and
  settles as usual.
- Does an abort stop this call? A step's forward call is not begun once the transaction's
  abort is recorded on its intent row (services.intake.abort_record, written before the
  abort's 202) unless a call of that leg was begun before (any attempt): then the call
  stands and the decider's too-late rule applies. Checked by the same statement, so an
  abort recorded before it ran is seen, and one recorded after finds the row. Undo legs and
  notifications are never stopped: an abort must still be able to undo, and to tell.

The row is written before the call, never after: a crash between the two leaves a row for
a call that may not have been made (a lookup settles it), never a call without a row.

- Is another process making this call right now? The row's lease (`holder`, `held_until`,
  services.dispatcher.call_lease) is taken by the begin that writes the row, and by
  `claim` before a redelivery looks up; its holder is the dispatching process, which
  claims its own lease at once. `release_many` clears the leases a process let go when it
  lost their partitions (services.dispatcher.held_leases), not at each call's end. A
  crash between the begin and the call, or after it, leaves a lease that lapses on its
  own; a claim waits for it, then looks up, as before. Every begin takes a lease (`Call`
  refuses one without a holder); rows written before the lease existed (or by a release
  without it) have none: claimed at once.
- Is the caller still the partition's owner? A claim and a begin carry the fence its
  process took the partition with (services.dispatcher.call_fence), and are refused (a
  claim SUPERSEDED, a begin `superseded`, writing nothing) once the partition's owner
  wrote a newer one to `call_fences` (`write_fence`, at each take): a zombie would call on
  a stale state. Newer is (the cluster's arrival, producer id, epoch): a Kafka cluster
  first seen later (`kafka_clusters`) supersedes the ones before it, so brokers replaced
  under the database need no hand (services.dispatcher.call_fence).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import asyncpg

from services.crash_points import FENCE_CLUSTER_REGISTERED, crash_point
from services.dispatcher.call_fence import Fence

# What `begin` answers is the call plan's (pure) type: services.dispatcher.call_plan.
from services.dispatcher.call_plan import Begun
from services.governance.store import switch_matches
from services.pg_pool import GENERIC_PLANS, create_pool

# A holder is one process's id (a uuid's 32 hex digits), with room to spare.
MAX_HOLDER_CHARS = 64
# A lease covers at most three provider requests of twice the provider timeout each
# (call_lease.lease_s): a day would take a timeout of four hours. Past this a setting is
# wrong, and Postgres's interval arithmetic must not be the one to say so.
MAX_LEASE_S = 86_400.0


async def was_begun(
    conn: asyncpg.Connection, tenant: str, op_key: str, leg: str, attempt: int
) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT 1 FROM calls_begun"
            " WHERE tenant = $1 AND op_key = $2 AND leg = $3 AND attempt = $4",
            tenant,
            op_key,
            leg,
            attempt,
        )
    )


@dataclass(frozen=True)
class Call:
    """One call about to be begun: its row's identity and what a switch's scope matches."""

    tenant: str
    tx_id: str
    op_key: str
    leg: str
    attempt: int
    agent_id: str
    provider: str
    operation: str
    # Who takes the row's lease and for how long (services.dispatcher.call_lease). No
    # default: a begin that forgot them would write a row nobody holds, which another
    # process's claim takes at once while this call may be on the wire.
    holder: str
    lease_s: float
    # The fence its process took the call's partition with (services.dispatcher.call_fence):
    # nothing is written once the partition's owner wrote a newer one. No default either:
    # None only for a process that takes no partitions (then it is not fenced).
    fence: Fence | None

    def __post_init__(self) -> None:
        if not 0 < len(self.holder) <= MAX_HOLDER_CHARS:
            raise ValueError(
                f"a begun call's holder is 1-{MAX_HOLDER_CHARS} characters (the dispatching"
                f" process's id, HeldLeases.holder), got {self.holder!r:.80}"
            )
        if not 0 < self.lease_s <= MAX_LEASE_S:
            raise ValueError(
                f"a begun call's lease is more than 0 and at most {MAX_LEASE_S:.0f} s"
                f" (services.dispatcher.call_lease.lease_s), got {self.lease_s!r}"
            )

    @property
    def leg_of(self) -> tuple[str, str, str]:
        return (self.tenant, self.op_key, self.leg)


async def begin(
    conn: asyncpg.Connection,
    *,
    tenant: str,
    tx_id: str,
    op_key: str,
    leg: str,
    attempt: int,
    agent_id: str,
    provider: str,
    operation: str,
    holder: str,
    lease_s: float,
    fence: Fence | None,
) -> Begun:
    """`begin_many` of one call."""
    call = Call(
        tenant, tx_id, op_key, leg, attempt, agent_id, provider, operation, holder, lease_s, fence
    )
    (begun,) = await begin_many(conn, [call])
    return begun


async def open_begin_pool(url: str) -> asyncpg.Pool:
    """The begins' pool (services.dispatcher.gatekeeper): `_BEGIN` planned generically
    (services.pg_pool.GENERIC_PLANS). By Postgres's choice the begin was planned again at
    almost every call: 0.50 plans and 0.20 ms of planning per transaction at c30, 40 % of
    the begin's server time (docs/benchmark.md). Its plan probes every table by primary key
    per call (tests/integration/test_begin_plan.py); only the gate's begins run on this
    pool, its other statements keep Postgres's choice."""
    return await create_pool(url, min_size=1, max_size=4, server_settings=GENERIC_PLANS)


async def begin_many(conn: asyncpg.Connection, calls: Sequence[Call]) -> list[Begun]:
    """Record each call unless an engaged switch covers it or an abort stops it, and say
    whether its row existed before: what `_BEGIN` answers for each, in order. The calls of
    one leg (tenant, key, leg) go in statements of their own, one after another in the
    order asked, because one statement's snapshot does not see the rows it writes: two
    begins of one call in one statement would both write "begun now" and both call."""
    answers: list[Begun | None] = [None] * len(calls)
    waiting = list(enumerate(calls))
    while waiting:
        batch: dict[tuple[str, str, str], tuple[int, Call]] = {}
        later: list[tuple[int, Call]] = []
        for n, call in waiting:
            if call.leg_of in batch:
                later.append((n, call))
            else:
                batch[call.leg_of] = (n, call)
        for n, begun in await _begin_once(conn, list(batch.values())):
            answers[n] = begun
        waiting = later
    assert all(begun is not None for begun in answers)
    return [begun for begun in answers if begun is not None]


def _recorded(reader_arrival: str) -> str:
    """A partition's recorded fence `f` as the one order of fences reads it: (its cluster's
    arrival, producer id, epoch); a fence written before migration 0013 (arrival 0) is read
    as the reader's own cluster's (the one in use when it was written). The one rule of
    which fence is newer, in the claim's, the begin's and the write's statements alike."""
    return f"(coalesce(nullif(f.arrival, 0), {reader_arrival}), f.producer_id, f.epoch)"


# The recorded fence is newer than the caller's (its cluster's row `k`, its token `a`).
_NEWER = _recorded("k.arrival") + " > (k.arrival, a.producer_id, a.epoch)"


# One statement for every call of a batch, each judged on its own (one snapshot: a switch
# cannot be engaged, nor an abort recorded, nor a row written, between the check and the
# write as this statement sees it), so a first send needs no `was_begun` round trip before
# it, and the calls a partition's transaction committed together need one statement.
_BEGIN = (
    "WITH asked AS MATERIALIZED ("
    "  SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::text[],"
    "   $6::int[], $7::text[], $8::text[], $9::text[], $10::text[], $11::float8[],"
    "   $12::text[], $13::bigint[], $14::int[], $15::text[])"
    "  AS a(n, tenant, tx_id, op_key, leg, attempt, agent_id, provider, operation, holder,"
    "   lease_s, fence_owner, producer_id, epoch, fence_cluster)),"
    " judged AS MATERIALIZED ("
    "  SELECT a.n, a.tenant, a.op_key, a.leg, a.attempt, a.holder, a.lease_s,"
    "   coalesce((SELECT array_agg(k.switch_id ORDER BY k.switch_id) FROM kill_switches k"
    "    WHERE k.tenant = a.tenant AND "
    + switch_matches("a.agent_id", "a.provider", "a.operation")
    + "), '{}'::text[]) AS switches,"
    # A forward leg of a step (not a notification) of an aborted transaction, never begun
    # under any attempt: one primary-key probe of the intent row per call.
    "   EXISTS (SELECT 1 FROM intents i WHERE i.tenant = a.tenant AND i.tx_id = a.tx_id"
    "    AND i.abort_requested_at IS NOT NULL AND a.leg = 'forward'"
    "    AND i.operations @> jsonb_build_array("
    "     jsonb_build_object('op_key', a.op_key, 'kind', 'step'))"
    "    AND NOT EXISTS (SELECT 1 FROM calls_begun c"
    "     WHERE c.tenant = a.tenant AND c.op_key = a.op_key AND c.leg = a.leg)) AS aborted,"
    # The snapshot's: the rows `written` inserts are not visible to it. A scalar subquery
    # on the primary key, not EXISTS: Postgres may run an EXISTS as one hash of the whole
    # table per execution, and a generic plan made while the table was small (a young
    # database, the benchmark's warm-up) kept doing so as it grew (open_begin_pool).
    "   coalesce((SELECT true FROM calls_begun c WHERE c.tenant = a.tenant"
    "    AND c.op_key = a.op_key AND c.leg = a.leg AND c.attempt = a.attempt), false)"
    "   AS existed,"
    # The caller's partition was taken after it (services.dispatcher.call_fence): a scalar
    # subquery on the fences' and the clusters' primary keys, as `existed`; NULL fields (no
    # fence) never match, nor does a cluster not registered yet (its take's write is on its
    # way, and a cluster registered later is the newest).
    "   coalesce((SELECT true FROM call_fences f, kafka_clusters k"
    "    WHERE f.owner = a.fence_owner AND k.cluster_id = a.fence_cluster AND "
    + _NEWER
    + "), false) AS superseded"
    "  FROM asked a),"
    " written AS ("
    "  INSERT INTO calls_begun (tenant, op_key, leg, attempt, holder, held_until)"
    "  SELECT j.tenant, j.op_key, j.leg, j.attempt, j.holder,"
    "   clock_timestamp() + make_interval(secs => j.lease_s) FROM judged j"
    "  WHERE j.switches = '{}' AND NOT j.aborted AND NOT j.superseded"
    # In key order, as every batch: two batches meeting on two rows wait, never deadlock.
    "  ORDER BY j.tenant, j.op_key, j.leg, j.attempt"
    "  ON CONFLICT DO NOTHING RETURNING tenant, op_key, leg, attempt)"
    " SELECT j.n, j.switches, j.aborted, j.existed, j.superseded, EXISTS (SELECT 1 FROM written w"
    "  WHERE w.tenant = j.tenant AND w.op_key = j.op_key AND w.leg = j.leg"
    "  AND w.attempt = j.attempt) AS written"
    " FROM judged j"
)


async def _begin_once(
    conn: asyncpg.Connection, calls: list[tuple[int, Call]]
) -> list[tuple[int, Begun]]:
    """`_BEGIN` for calls of distinct legs."""
    rows = await conn.fetch(
        _BEGIN,
        [n for n, _ in calls],
        [c.tenant for _, c in calls],
        [c.tx_id for _, c in calls],
        [c.op_key for _, c in calls],
        [c.leg for _, c in calls],
        [c.attempt for _, c in calls],
        [c.agent_id for _, c in calls],
        [c.provider for _, c in calls],
        [c.operation for _, c in calls],
        [c.holder for _, c in calls],
        [c.lease_s for _, c in calls],
        [c.fence.owner if c.fence else None for _, c in calls],
        [c.fence.producer_id if c.fence else None for _, c in calls],
        [c.fence.epoch if c.fence else None for _, c in calls],
        [c.fence.cluster if c.fence else None for _, c in calls],
    )
    return [
        (
            row["n"],
            Begun(
                tuple(row["switches"]),
                bool(row["written"]),
                bool(row["aborted"]),
                bool(row["existed"]),
                bool(row["superseded"]),
            ),
        )
        for row in rows
    ]


class Claimed(Enum):
    """What `claim` found."""

    # The lease is this holder's now: nobody else's call of the attempt is live.
    TAKEN = "taken"
    # Another holder's lease is live: its call may be on the wire; ask again later.
    HELD = "held"
    # No row (purged with its settled leg): nothing to wait for, nothing held.
    NO_ROW = "no_row"
    # The partition's owner took it after the claimer did (its fence is newer: services.
    # dispatcher.call_fence): the call is not the claimer's to make, whoever holds it.
    SUPERSEDED = "superseded"


# Taken when nobody holds the row, its lease lapsed, or it is this holder's already; never
# when the claimer's fence ($7: owner, $8: producer id, $9: epoch, $10: cluster) is older
# than the one its partition's owner wrote (`call_fences`, `_NEWER`), whatever the lease:
# the zombie's stale state must not call. A claimer without a fence (NULL) is not fenced.
# The fence is read in the statement's snapshot: one written while it runs is seen by the
# next poll.
_SUPERSEDED = (
    "EXISTS (SELECT 1 FROM call_fences f, kafka_clusters k,"
    " (SELECT $8::bigint AS producer_id, $9::int AS epoch) a"
    " WHERE f.owner = $7 AND k.cluster_id = $10 AND " + _NEWER + ")"
)
_CLAIM = (
    "WITH taken AS (UPDATE calls_begun"
    "  SET holder = $5, held_until = clock_timestamp() + make_interval(secs => $6)"
    "  WHERE tenant = $1 AND op_key = $2 AND leg = $3 AND attempt = $4"
    "   AND (held_until IS NULL OR held_until <= clock_timestamp() OR holder = $5)"
    "   AND NOT " + _SUPERSEDED + "  RETURNING 1)"
    " SELECT EXISTS (SELECT 1 FROM taken) AS taken, EXISTS (SELECT 1 FROM calls_begun"
    "  WHERE tenant = $1 AND op_key = $2 AND leg = $3 AND attempt = $4) AS found,"
    " " + _SUPERSEDED + " AS superseded"
)


Row = tuple[str, str, str, int]  # (tenant, op_key, leg, attempt)


async def claim(
    conn: asyncpg.Connection,
    call: Row,
    holder: str,
    lease_s: float,
    fence: Fence | None,
) -> Claimed:
    """Take the lease of `call` (tenant, op_key, leg, attempt) for `holder`, unless another
    holder's is live, or `fence` is older than its partition owner's (`write_fence`)."""
    owner, producer_id, epoch, cluster = (
        (fence.owner, fence.producer_id, fence.epoch, fence.cluster)
        if fence
        else (None, None, None, None)
    )
    row = await conn.fetchrow(_CLAIM, *call, holder, lease_s, owner, producer_id, epoch, cluster)
    assert row is not None
    if row["taken"]:
        return Claimed.TAKEN
    if row["superseded"]:
        return Claimed.SUPERSEDED
    return Claimed.HELD if row["found"] else Claimed.NO_ROW


async def write_fence(conn: asyncpg.Connection, fence: Fence) -> bool:
    """The fence of a partition's new owner, written when it takes the partition (services.
    dispatcher.call_fence); kept only if newer than the one there (`_NEWER`: a later
    cluster's, or a later take's of the same cluster). True: written (False: the one there
    is as new or newer, from a later take or a cluster that arrived later)."""
    # Its cluster first, in a statement of its own: a second statement's snapshot sees the
    # registration that a concurrent take of the same cluster committed (ON CONFLICT waits
    # for it), which one statement's would not. A crash between the two leaves the cluster
    # registered with no fence written: the fence there (the previous take's) stands, so
    # that take's zombie is not refused until the next take writes its own
    # (tests/fault/test_call_fence_write_crash.py).
    await conn.execute(
        "INSERT INTO kafka_clusters (cluster_id) VALUES ($1) ON CONFLICT DO NOTHING",
        fence.cluster,
    )
    crash_point(FENCE_CLUSTER_REGISTERED)
    return bool(
        await conn.fetchval(
            "INSERT INTO call_fences AS f (owner, arrival, producer_id, epoch)"
            " SELECT $1, k.arrival, $2, $3 FROM kafka_clusters k WHERE k.cluster_id = $4"
            " ON CONFLICT (owner) DO UPDATE SET arrival = excluded.arrival,"
            "  producer_id = excluded.producer_id, epoch = excluded.epoch"
            "  WHERE " + _recorded("excluded.arrival") + " < (excluded.arrival,"
            "   excluded.producer_id, excluded.epoch)"
            " RETURNING true",
            fence.owner,
            fence.producer_id,
            fence.epoch,
            fence.cluster,
        )
    )


async def release_many(conn: asyncpg.Connection, released: Sequence[tuple[Row, str]]) -> None:
    """Leases a process let go (services.dispatcher.held_leases): each is cleared if it is
    still that holder's (a lapsed lease another process claimed since is that process's)."""
    await conn.execute(
        "UPDATE calls_begun c SET held_until = NULL"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[])"
        "  AS r(tenant, op_key, leg, attempt, holder)"
        " WHERE c.tenant = r.tenant AND c.op_key = r.op_key AND c.leg = r.leg"
        "  AND c.attempt = r.attempt AND c.holder = r.holder",
        [row[0] for row, _ in released],
        [row[1] for row, _ in released],
        [row[2] for row, _ in released],
        [row[3] for row, _ in released],
        [holder for _, holder in released],
    )
