"""Planning the pull reconciler's lookups: which stuck operation legs to look up now,
and which have spent their budget and go to a person.

Pure: no I/O, no clock (`now` comes in), no randomness. The runtime (services.pull_reconciler)
loads the candidates and the bookkeeping, calls `plan`, and then claims each step in
Postgres with a compare-and-set on `lookups` (reconcilers.store), so that two ticks or two
processes that planned from the same snapshot cannot both do lookup n of one leg.

Bookkeeping is per (op_key, attempt): a re-dispatch (attempt + 1) is a new call with a
fresh budget, exactly as the decider fences observations by attempt.

A review request that never takes effect (lost between the claim and the send, or read by
a decider that dead-letters it) leaves the leg in flight. It is asked again after
`review_retry`, doubling after each request up to `review_retry_max`, and after
`review_requests` requests no more: the planner gives the leg up once (`GiveUp`), which
the runtime logs loudly and counts in a gauge (recon_reconciler_legs_given_up), because
only a person can move it now.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from events.definition import Leg, OpStatus
from events.keys import lookup_observation_id
from events.keys import review_request_id as review_request_id

REVIEW_REASON = "lookup_budget_exhausted"


def maybe_sent(status: str, begun: bool) -> bool:
    """Whether an in-flight leg (its status, and whether its call has a `calls_begun` row)
    may be at its provider, and so is the reconciler's to look up. False only for a leg still
    `dispatched` whose call nobody began: not stuck at a provider, since the decider holding
    it makes the call once its transaction commits (or calls it again when it takes the
    partition over); looked up, it would find nothing and, past the budget, go to review
    unsent. A leg `unknown` was seen by a caller, begun or not, and is looked up."""
    return status != OpStatus.DISPATCHED or begun


@dataclass(frozen=True)
class Policy:
    after: timedelta  # a leg dispatched/unknown for longer than this is stuck
    budget: int  # lookups per (op_key, attempt)
    backoff: timedelta  # the wait after lookup 1; doubles after each lookup ...
    backoff_max: timedelta  # ... up to this
    # A review request claimed this long ago whose leg is still in flight is asked again:
    # the process may have died between the claim and the send (the request carries the
    # same message id, so a repeat that did arrive is dropped by the decider).
    review_retry: timedelta = timedelta(seconds=60)
    # ... doubling after each request up to this, and given up after this many requests:
    # about 4 h of asking at the defaults, never a request a minute for ever.
    review_retry_max: timedelta = timedelta(hours=1)
    review_requests: int = 8

    def review_wait(self, requests: int) -> timedelta:
        """How long to wait after request number `requests` before asking again."""
        return min(self.review_retry * (1 << max(requests - 1, 0)), self.review_retry_max)

    def delay_after(self, n: int) -> timedelta:
        """How long to wait after lookup n before lookup n + 1 (or, after the last one,
        before asking for review, so the last answer can still settle the leg)."""
        return min(self.backoff * (1 << (n - 1)), self.backoff_max)


@dataclass(frozen=True)
class FirstRequest:
    """The first request sent under a leg's key, as the log holds it: the payload of the
    leg's first dispatch (every attempt sends its first's: the key is the leg's) and a time
    no later than the first send under the key, whichever attempt made it (the earliest of
    its dispatches and of its begun calls). The runtime hands it to the adapter's lookup as
    services.providers.interface.Sent, whose rule it meets: the bound errs towards "too
    old", never towards resending under a pruned key."""

    payload: dict[str, Any]
    at: datetime


@dataclass(frozen=True)
class Candidate:
    """An operation leg in flight (`dispatched` or `unknown`), as the projection sees it."""

    tenant: str
    tx_id: str
    action: str
    leg: Leg
    op_key: str
    attempt: int
    provider: str
    operation: str
    since: datetime  # when the projection last saw the leg change
    # None when the log holds no dispatch of the key (nothing to resend, nothing to bound).
    first: FirstRequest | None = None


@dataclass(frozen=True)
class Lease:
    """What the reconciler has done for one (op_key, attempt)."""

    op_key: str
    attempt: int
    lookups: int
    next_at: datetime
    review_requested: bool = False
    review_requested_at: datetime | None = None  # when it was claimed (if known)
    review_requests: int = 0  # how many times it was claimed (0 on rows older than that)
    given_up: bool = False


@dataclass(frozen=True)
class Lookup:
    """Do lookup number `n` of this leg now; the next one is due at `next_at`."""

    leg: Candidate
    n: int
    next_at: datetime


@dataclass(frozen=True)
class Escalate:
    """The budget is spent and the leg is still in flight: ask for manual review."""

    leg: Candidate
    lookups: int
    requests: int = 0  # review requests claimed so far (the claim's compare-and-set)
    # Why a person must look: the budget spent, or (services.providers.lookup_strategy)
    # a provider that cannot be asked at all.
    reason: str = REVIEW_REASON


@dataclass(frozen=True)
class GiveUp:
    """Asked for review `requests` times and the leg is still in flight: stop asking."""

    leg: Candidate
    requests: int


Step = Lookup | Escalate | GiveUp
LeaseKey = tuple[str, int]


def plan(
    candidates: list[Candidate],
    leases: dict[LeaseKey, Lease],
    now: datetime,
    policy: Policy,
) -> list[Step]:
    steps: list[Step] = []
    for leg in candidates:
        lease = leases.get((leg.op_key, leg.attempt))
        if lease is None:
            if now - leg.since >= policy.after:
                steps.append(Lookup(leg, 1, now + policy.delay_after(1)))
            continue
        if lease.review_requested:
            # Already asked. Normally the leg then leaves `dispatched`/`unknown` and is no
            # candidate at all; still in flight past review_retry, the request was lost.
            claimed = lease.review_requested_at
            if lease.given_up or claimed is None:
                continue
            if now - claimed < policy.review_wait(lease.review_requests):
                continue
            if lease.review_requests < policy.review_requests:
                steps.append(Escalate(leg, lease.lookups, lease.review_requests))
            else:
                steps.append(GiveUp(leg, lease.review_requests))
            continue
        if now < lease.next_at:
            continue  # backing off
        if lease.lookups < policy.budget:
            n = lease.lookups + 1
            steps.append(Lookup(leg, n, now + policy.delay_after(n)))
        else:
            steps.append(Escalate(leg, lease.lookups))
    return steps


# The ids are derived in events.keys; the reconciler's runtime imports them from here.
observation_id = lookup_observation_id
