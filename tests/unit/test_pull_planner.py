"""The pull reconciler's planner: when to look a stuck leg up, and when to stop."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from events.definition import Leg
from reconcilers.pull import (
    Candidate,
    Escalate,
    GiveUp,
    Lease,
    LeaseKey,
    Lookup,
    Policy,
    Step,
    plan,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
POLICY = Policy(
    after=timedelta(seconds=10),
    budget=6,
    backoff=timedelta(seconds=1),
    backoff_max=timedelta(seconds=30),
)
LEG = Candidate(
    tenant="demo",
    tx_id="tx-1",
    action="charge",
    leg=Leg.FORWARD,
    op_key="rk1_a",
    attempt=1,
    provider="sandbox",
    operation="payments.charge",
    since=T0,
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_leg_younger_than_the_threshold_is_left_alone() -> None:
    assert plan([LEG], {}, at(9.9), POLICY) == []


def test_a_stuck_leg_gets_its_first_lookup() -> None:
    assert plan([LEG], {}, at(10), POLICY) == [Lookup(LEG, 1, at(11))]


def test_backoff_doubles_and_is_capped() -> None:
    assert [POLICY.delay_after(n).total_seconds() for n in range(1, 8)] == [
        1,
        2,
        4,
        8,
        16,
        30,
        30,
    ]


def test_a_leased_leg_waits_for_its_next_lookup() -> None:
    lease = Lease("rk1_a", 1, lookups=2, next_at=at(20))
    assert plan([LEG], {("rk1_a", 1): lease}, at(19.9), POLICY) == []
    assert plan([LEG], {("rk1_a", 1): lease}, at(20), POLICY) == [Lookup(LEG, 3, at(24))]


def test_past_the_budget_the_leg_goes_to_review_once_the_last_answer_had_time() -> None:
    lease = Lease("rk1_a", 1, lookups=6, next_at=at(60))
    assert plan([LEG], {("rk1_a", 1): lease}, at(59), POLICY) == []
    assert plan([LEG], {("rk1_a", 1): lease}, at(60), POLICY) == [Escalate(LEG, 6)]
    asked = replace(lease, review_requested=True)
    assert plan([LEG], {("rk1_a", 1): asked}, at(600), POLICY) == []


def test_a_review_claim_whose_leg_is_still_in_flight_expires_and_is_asked_again() -> None:
    # The claim was taken at 60 and the leg is still `unknown`: the process that claimed
    # it may have died before sending RequestReview, so it must not block review forever.
    claimed = Lease(
        "rk1_a", 1, lookups=6, next_at=at(60), review_requested=True, review_requested_at=at(60)
    )
    retry = POLICY.review_retry.total_seconds()
    assert plan([LEG], {("rk1_a", 1): claimed}, at(60 + retry - 0.1), POLICY) == []
    assert plan([LEG], {("rk1_a", 1): claimed}, at(60 + retry), POLICY) == [Escalate(LEG, 6)]


def test_a_new_attempt_has_a_fresh_budget() -> None:
    spent = Lease("rk1_a", 1, lookups=6, next_at=at(0))
    second = replace(LEG, attempt=2, since=at(100))
    assert plan([second], {("rk1_a", 1): spent}, at(110), POLICY) == [Lookup(second, 1, at(111))]


# --- ticks fired twice, late, or by two processes -------------------------------------


def claim(leases: dict[LeaseKey, Lease], step: Step, now: datetime) -> bool:
    """The store's compare-and-set (reconcilers.store.claim_lookup/claim_review)."""
    key = (step.leg.op_key, step.leg.attempt)
    lease = leases.get(key)
    if isinstance(step, GiveUp):
        return False  # never planned here: no claim of a review is ever stale
    if isinstance(step, Lookup):
        if step.n == 1:
            if lease is not None:
                return False
        elif (
            lease is None
            or lease.lookups != step.n - 1
            or lease.next_at > now
            or lease.review_requested
        ):
            return False
        leases[key] = Lease(key[0], key[1], step.n, step.next_at)
        return True
    if lease is None or lease.lookups != step.lookups or lease.review_requested:
        return False
    leases[key] = replace(lease, review_requested=True)
    return True


@settings(max_examples=300)
@given(
    ticks=st.lists(
        st.tuples(st.floats(0, 400), st.integers(1, 3)),  # when, and how many copies at once
        max_size=40,
    ),
    budget=st.integers(1, 8),
)
def test_no_schedule_of_ticks_exceeds_the_budget_or_repeats_a_lookup(
    ticks: list[tuple[float, int]], budget: int
) -> None:
    policy = replace(POLICY, budget=budget)
    leases: dict[LeaseKey, Lease] = {}
    done: list[tuple[int, datetime]] = []
    reviews = 0
    for when, copies in sorted(ticks):
        now = at(when)
        # Every copy plans from the same snapshot, then all race to claim.
        plans = [plan([LEG], dict(leases), now, policy) for _ in range(copies)]
        for steps in plans:
            for step in steps:
                if claim(leases, step, now):
                    if isinstance(step, Lookup):
                        done.append((step.n, now))
                    elif isinstance(step, Escalate):
                        reviews += 1
    numbers = [n for n, _ in done]
    assert numbers == list(range(1, len(numbers) + 1))  # each n once, in order
    assert len(numbers) <= budget
    assert reviews <= 1 and (reviews == 0 or len(numbers) == budget)
    for (n, first), (_, second) in pairwise(done):
        assert second - first >= policy.delay_after(n)  # backoff respected
    if done:
        assert done[0][1] - LEG.since >= policy.after


# --- review requests that never take effect --------------------------------------------


def test_review_requests_back_off_doubling_up_to_a_cap_and_then_the_leg_is_given_up() -> None:
    # Given a leg whose review request never takes effect (the decider dead-letters it),
    # when the reconciler ticks every second for a day, claiming what it plans as the
    # store does,
    policy = replace(
        POLICY, review_retry=timedelta(seconds=60), review_retry_max=timedelta(minutes=10)
    )
    key = ("rk1_a", 1)
    leases = {key: Lease("rk1_a", 1, lookups=6, next_at=at(0))}
    asked: list[float] = []
    given_up: list[float] = []
    for second in range(0, 86_400, 1):
        now = at(second)
        for step in plan([LEG], dict(leases), now, policy):
            lease = leases[key]
            if isinstance(step, Escalate):
                assert step.requests == lease.review_requests
                leases[key] = replace(
                    lease,
                    review_requested=True,
                    review_requested_at=now,
                    review_requests=lease.review_requests + 1,
                )
                asked.append(second)
            elif isinstance(step, GiveUp):
                leases[key] = replace(lease, given_up=True)
                given_up.append(second)
    # then it asks review_requests times, waiting 60 s, doubling, capped at 10 min,
    waits = [b - a for a, b in pairwise(asked)]
    assert len(asked) == policy.review_requests
    assert waits == [60, 120, 240, 480, 600, 600, 600]
    # and gives the leg up once, one capped wait after the last request, for ever after.
    assert given_up == [asked[-1] + 600]


def test_a_given_up_leg_is_left_to_a_person() -> None:
    lease = Lease(
        "rk1_a",
        1,
        lookups=6,
        next_at=at(0),
        review_requested=True,
        review_requested_at=at(0),
        review_requests=POLICY.review_requests,
        given_up=True,
    )
    assert plan([LEG], {("rk1_a", 1): lease}, at(10**6), POLICY) == []


def test_a_lease_from_before_the_count_is_asked_again_after_the_first_wait() -> None:
    # Rows written before `review_requests` existed read as 0 requests.
    lease = Lease(
        "rk1_a", 1, lookups=6, next_at=at(0), review_requested=True, review_requested_at=at(0)
    )
    assert plan([LEG], {("rk1_a", 1): lease}, at(60), POLICY) == [Escalate(LEG, 6, 0)]
