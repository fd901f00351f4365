"""The simulated dispatcher's projection check: when the projection proves a dispatch's
attempt over (and only then) it is not acted on."""

import pytest
from simulation.in_flight import ProjectedLeg, ProjectedOp, over_because

from events.definition import Leg, OpStatus
from events.transaction_events import OperationDispatched


def dispatch(leg: Leg, attempt: int) -> OperationDispatched:
    return OperationDispatched(
        action="charge",
        leg=leg,
        op_key="k",
        attempt=attempt,
        lookup_first=False,
        provider="sandbox",
        operation="payments.charge",
        payload={},
    )


def projected(
    state: OpStatus,
    attempt: int,
    compensation: OpStatus | None = None,
    compensation_attempt: int = 0,
) -> ProjectedOp:
    return ProjectedOp(
        ProjectedLeg(state, attempt), ProjectedLeg(compensation, compensation_attempt)
    )


def test_a_dispatch_not_projected_yet_is_acted_on() -> None:
    assert over_because(dispatch(Leg.FORWARD, 1), None) is None


@pytest.mark.parametrize("state", [OpStatus.DISPATCHED, OpStatus.UNKNOWN])
def test_an_open_attempt_is_acted_on(state: OpStatus) -> None:
    assert over_because(dispatch(Leg.FORWARD, 2), projected(state, 2)) is None


def test_a_projection_behind_the_dispatch_is_not_proof() -> None:
    assert over_because(dispatch(Leg.FORWARD, 3), projected(OpStatus.FAILED, 2)) is None
    assert over_because(dispatch(Leg.FORWARD, 1), projected(OpStatus.PENDING, 0)) is None


@pytest.mark.parametrize(
    "state",
    [
        OpStatus.CONFIRMED,
        OpStatus.FAILED,
        OpStatus.MANUAL_REVIEW,
        OpStatus.COMPENSATING,
        OpStatus.COMPENSATED,
    ],
)
def test_a_settled_attempt_is_over(state: OpStatus) -> None:
    assert over_because(dispatch(Leg.FORWARD, 1), projected(state, 1)) is not None


def test_an_attempt_overtaken_by_a_later_one_is_over() -> None:
    reason = over_because(dispatch(Leg.FORWARD, 1), projected(OpStatus.DISPATCHED, 2))
    assert reason is not None and "attempt 2" in reason


def test_an_undo_is_judged_by_its_own_leg() -> None:
    undoing = projected(OpStatus.COMPENSATING, 1, OpStatus.DISPATCHED, 1)
    assert over_because(dispatch(Leg.COMPENSATION, 1), undoing) is None
    assert over_because(dispatch(Leg.FORWARD, 1), undoing) is not None
    undone = projected(OpStatus.COMPENSATED, 1, OpStatus.CONFIRMED, 1)
    assert over_because(dispatch(Leg.COMPENSATION, 1), undone) is not None
    retried = projected(OpStatus.COMPENSATING, 1, OpStatus.DISPATCHED, 2)
    assert over_because(dispatch(Leg.COMPENSATION, 1), retried) is not None
    not_yet = projected(OpStatus.CONFIRMED, 1)
    assert over_because(dispatch(Leg.COMPENSATION, 1), not_yet) is None
