"""The side-effect class of the call a leg makes: the forward leg calls the step's
operation, the undo its compensation's. Read from what the events recorded at submission
(events.legacy_facts for events from before they did), never from the configured catalog:
a replay decides as the live run did.

Pure: no I/O, no clock."""

from events.catalog import OperationFacts
from events.definition import Leg, OperationSpec
from events.legacy_facts import recorded_facts


def leg_info(spec: OperationSpec, leg: Leg) -> OperationFacts:
    if leg is Leg.COMPENSATION and spec.compensation is not None:
        return recorded_facts(spec.compensation.facts, spec.compensation.operation)
    return recorded_facts(spec.facts, spec.operation)
