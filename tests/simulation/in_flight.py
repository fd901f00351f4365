"""Is a dispatch still in flight? What the standalone dispatcher asked of the projection
before it called a provider, kept here for the simulation's dispatcher, which still reads
recon.events (production dispatches from the decider's committed output instead, where the
live state is the authority: services/decider/dispatch_host.py).

A dispatcher reads recon.events from its group's committed offsets, or from the beginning
when the group has none (a new group, a reset, offsets expired past the broker's retention).
Then every dispatch ever made comes again, behind only a lookup, and a provider whose keys
expire (Stripe: 24 h) would apply an old call again. A dispatch is acted on only while the
decider may still want it: the projection (Postgres, built from the same events) proves an
attempt is over when its leg is terminal or a later attempt exists.

The projection may lag the events, never lead them: a row missing or at an earlier attempt
means "not caught up yet", and the dispatch is acted on as before.
"""

from dataclasses import dataclass

from events.definition import Leg, OpStatus
from events.transaction_events import OperationDispatched

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
