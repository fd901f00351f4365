"""transactions.unanswered rebuilds, from a state alone, the very dispatch the decider
committed for each leg still `dispatched` with no answer: what a decider that takes the
partition calls again (services/decider/dispatch_host.py). Over arbitrary interleavings of
answers, webhooks, aborts, saga commands and reviews (tests/support/decider_scenarios.py)."""

from hypothesis import given
from support.decider_scenarios import scenarios

from events.definition import Leg
from events.inputs import DeciderInput
from events.legs import LegStatus
from events.transaction_events import OperationDispatched
from transactions.transaction import handle, initial_state
from transactions.unanswered import unanswered


@given(scenarios())
def test_the_unanswered_dispatches_are_the_ones_committed(inputs: list[DeciderInput]) -> None:
    state = initial_state("demo", "tx-1")
    last: dict[tuple[str, Leg], OperationDispatched] = {}
    for message in inputs:
        state, envelopes = handle(state, message)
        for envelope in envelopes:
            event = envelope.event()
            if isinstance(event, OperationDispatched):
                last[(event.action, event.leg)] = event
        waiting = {
            (op.spec.action, leg)
            for op in state.operations
            for leg, current in op.legs()
            if current.status is LegStatus.DISPATCHED
        }
        rebuilt = unanswered(state)
        assert {(d.action, d.leg) for d in rebuilt} == waiting
        for dispatch in rebuilt:
            assert dispatch == last[(dispatch.action, dispatch.leg)], (dispatch, last)
