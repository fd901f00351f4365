"""The side-effect class of the call a leg makes: the forward leg calls the step's
operation, the undo its compensation's.

Pure: no I/O, no clock."""

from events.catalog import OperationInfo, operation_info
from events.definition import Leg, OperationSpec


def leg_info(spec: OperationSpec, leg: Leg) -> OperationInfo:
    if leg is Leg.COMPENSATION and spec.compensation is not None:
        return operation_info(spec.provider, spec.compensation.operation)
    return operation_info(spec.provider, spec.operation)
