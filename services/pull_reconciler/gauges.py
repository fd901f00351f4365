"""The gauges that say how things stand now rather than count what happened, read from
the projections on the reconciler's schedule (services.metrics)."""

import logging

import asyncpg

from events.definition import OpStatus, ReviewState
from projections.operation_row import either_leg_in
from reconcilers import store
from services.metrics import (
    LEGS_GIVEN_UP,
    OLDEST_OPEN_REVIEW_SECONDS,
    OLDEST_UNKNOWN_SECONDS,
    REVIEWS_OPEN,
)

log = logging.getLogger(__name__)

# Often enough for a dashboard, rare enough to cost nothing; the pull tick's period is
# used when it is shorter (tests run it fast).
REFRESH_S = 15.0


# How many reviews are open, across tenants, and the oldest one's age in seconds: by the
# partial index of the open reviews (migration 0005), whose predicate the state written
# here as a literal matches in every plan (a parameter would not, in a generic plan).
OPEN_REVIEWS = (
    "SELECT count(*) AS open, coalesce(extract(epoch FROM now() - min(created_at)), 0) AS age"
    f" FROM reviews WHERE state = '{ReviewState.OPEN.value}'"
)
# Seconds since the oldest leg in state $1 (`unknown`) entered it.
OLDEST_UNKNOWN = (
    "SELECT coalesce(extract(epoch FROM now() - min(updated_at)), 0)"
    f" FROM operations WHERE {either_leg_in('$1')}"
)


async def refresh_gauges(pool: asyncpg.Pool) -> None:
    try:
        async with pool.acquire() as conn:
            # Ages by the database's clock, like the times the projector wrote (events'
            # times); a leg's updated_at is when it entered its current state.
            reviews = await conn.fetchrow(OPEN_REVIEWS)
            REVIEWS_OPEN.set(reviews["open"])
            OLDEST_OPEN_REVIEW_SECONDS.set(reviews["age"])
            LEGS_GIVEN_UP.set(await store.given_up_in_flight(conn))
            OLDEST_UNKNOWN_SECONDS.set(await conn.fetchval(OLDEST_UNKNOWN, OpStatus.UNKNOWN.value))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
        # The gauge keeps its last value; the next refresh tries again.
        log.warning("refreshing the metrics' gauges failed (%r)", error)
