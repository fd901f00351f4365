"""Is a dispatch still in flight? Asked of the projection before a provider is called.

A dispatcher reads recon.events from its group's committed offsets, or from the beginning
when the group has none (a new group, a reset, offsets expired past the broker's retention).
Then every dispatch ever made comes again, behind only a lookup, and a provider whose keys
expire (Stripe: 24 h) would apply an old call again. A dispatch is acted on only while the
decider may still want it: the projection (Postgres, built from the same events) proves an
attempt is over when its leg is terminal or a later attempt exists.

The projection may lag the events, never lead them: a row missing or at an earlier attempt
means "not caught up yet", and the dispatch is acted on as before.
"""

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import asyncpg

from events.definition import Leg, OpStatus
from events.transaction_events import OperationDispatched
from services.pg_pool import UNREACHABLE, create_pool

log = logging.getLogger(__name__)

OpId = tuple[str, str, str]  # tenant, tx_id, action
# The states in which an attempt still waits for what a provider says.
OPEN = frozenset({OpStatus.DISPATCHED, OpStatus.UNKNOWN})


@dataclass(frozen=True)
class ProjectedLeg:
    state: OpStatus | None
    attempt: int


@dataclass(frozen=True)
class ProjectedOp:
    forward: ProjectedLeg
    compensation: ProjectedLeg


def over_because(dispatch: OperationDispatched, projected: ProjectedOp | None) -> str | None:
    """Why the projection proves this dispatch's attempt over, or None to act on it."""
    if projected is None:
        return None  # not projected yet
    leg = projected.forward if dispatch.leg is Leg.FORWARD else projected.compensation
    if leg.attempt > dispatch.attempt:
        return f"attempt {leg.attempt} of the {dispatch.leg.value} leg exists"
    if leg.attempt < dispatch.attempt or leg.state is None:
        return None  # the projection has not caught up with this dispatch
    if leg.state in OPEN:
        return None
    return f"the {dispatch.leg.value} leg's attempt {leg.attempt} is {leg.state.value}"


class ProjectionUnavailable(RuntimeError):
    """Postgres did not answer: the batch waits (a dispatch is never acted on unchecked)."""


class Projection:
    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.pool: asyncpg.Pool | None = None

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    async def operations(self, ids: Iterable[OpId]) -> dict[OpId, ProjectedOp]:
        """One query for a whole batch."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        try:
            if self.pool is None:
                pool: asyncpg.Pool = await create_pool(self.database_url, min_size=1, max_size=2)
                self.pool = pool
            rows = await self.pool.fetch(
                "SELECT o.tenant, o.tx_id, o.action, o.state, o.attempts, o.comp_state,"
                " o.comp_attempts FROM operations o"
                " JOIN unnest($1::text[], $2::text[], $3::text[]) AS w(tenant, tx_id, action)"
                " USING (tenant, tx_id, action)",
                [t for t, _, _ in wanted],
                [x for _, x, _ in wanted],
                [a for _, _, a in wanted],
            )
        except UNREACHABLE as error:
            if self.pool is not None:
                # Connections that saw the server go away are replaced on their next use.
                await self.pool.expire_connections()
            raise ProjectionUnavailable(f"{type(error).__name__}: {error}") from error
        return {
            (r["tenant"], r["tx_id"], r["action"]): ProjectedOp(
                forward=ProjectedLeg(OpStatus(r["state"]), r["attempts"]),
                compensation=ProjectedLeg(
                    OpStatus(r["comp_state"]) if r["comp_state"] else None, r["comp_attempts"]
                ),
            )
            for r in rows
        }
