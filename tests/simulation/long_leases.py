"""Schedules whose call leases are production's length (services.dispatcher.call_lease at
a 5 s provider timeout, or a slow provider's 30 s), drawn apart from the schedule's own
generator so the others replay as before.

Why: at the simulated provider's quarter of a second a dead holder's lease lapses in 2.5 s,
long before the pull reconciler's lookups send its leg to a person (`POLICY`: stuck after
5 s, four lookups, about 20 s), so a claim that waits for it never meets a transaction a
person failed meanwhile, the case the question after a waited claim (call_plan.Awaited)
and a revoked resume's giving up (Call.claim) are for. With 12-62 s leases it does; and in
these schedules the operator judges a review while every call still running only waits on
a claim (`judges_while`), since such a call can send nothing without asking the live state
again, which is the promise under test. Elsewhere the operator waits for every call to end
(tests.simulation.world._in_dispatch: a person checking the provider while a call may still
reach it judges too early, the operator's race, not recon's).
"""

import random
from dataclasses import dataclass

from .dispatch_host import Running

# Production's default provider timeout, and a slow provider's.
TIMEOUTS_S = (5.0, 30.0)
# A claim polls every CLAIM_POLL_S through such a lease (up to 250 steps for 62 s): one
# schedule in eight keeps the cost of the default seeds small.
SHARE = 1 / 8


# Faults last this many steps longer at most: a claim's polls are steps, and a revocation
# or a lost partition (drawn only while faults last) must be able to fall while one waits.
LONGER_FAULTS = 300


@dataclass(frozen=True)
class LongLeases:
    provider_timeout_s: float
    longer_faults: int


def drawn(seed: int) -> LongLeases | None:
    """The schedule's provider timeout and how much longer its faults last, or None for
    the simulated provider's own."""
    rng = random.Random(f"leases:{seed}")
    if rng.random() >= SHARE:
        return None
    return LongLeases(rng.choice(TIMEOUTS_S), rng.randint(0, LONGER_FAULTS))


def judges_while(calls: list[Running]) -> bool:
    """Whether the operator may resolve a review while these calls run: each is polling a
    claim another holder's live lease keeps (it asks Awaited, or gives up, before it
    could look up or send)."""
    return all(c.claiming for c in calls)
