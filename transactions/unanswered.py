"""The dispatches a transaction's state still waits on: every leg `dispatched` with no
answer, as the OperationDispatched that dispatched it. A decider that takes a partition
runs these through the call plan again (services.decider.dispatch_host), because a call it
hosts lives in the process that committed the dispatch: that process may have died, or its
transaction with the answer aborted, after the dispatch was committed.

Rebuilt from the state by the rule that made the dispatch (transactions.transaction.
_dispatch): the leg's key, attempt, operation, payload (a compensation's is derived from the
step and its evidence, fixed once the step is confirmed) and recorded facts. `lookup_first`
is what every dispatch of that attempt carried: a first attempt never, a later one always
but for a read (asked again without a lookup, events.retry_policy.resend_without_lookup; a
read looked up first changes nothing either). The agent charged is the current owner when
it is not the submitter (transactions.ownership.charged_to). Redelivery is still judged by
the call plan, never by this: a call begun before is looked up first, and a destructive one
found absent is not sent again.

Pure: no I/O, no clock.
"""

from events.definition import Leg
from events.legs import LegStatus
from events.retry_policy import resend_without_lookup
from events.transaction_events import OperationDispatched
from transactions.side_effects import leg_info
from transactions.state import TransactionState
from transactions.transaction import _dispatch


def unanswered(state: TransactionState) -> list[OperationDispatched]:
    """The dispatch of every leg of `state` that is `dispatched` and has no answer."""
    found: list[OperationDispatched] = []
    owner = state.owner.agent_id if state.owner else None
    for op in state.operations:
        for leg, current in op.legs():
            if current.status is not LegStatus.DISPATCHED:
                continue
            attempt = current.attempt
            lookup_first = attempt > 1 and not resend_without_lookup(leg_info(op.spec, leg))
            pin = op.pinned_revision if leg is Leg.FORWARD else None
            dispatch = _dispatch(op, leg, attempt, lookup_first=lookup_first, pin=pin)
            if owner is not None and owner != state.agent_id:
                dispatch = dispatch.model_copy(update={"agent_id": owner})
            found.append(dispatch)
    return found
