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
from events.transaction_events import Event, OperationDispatched
from transactions.ownership import charged_to
from transactions.side_effects import leg_info
from transactions.state import TransactionState
from transactions.transaction import _dispatch


def unanswered(state: TransactionState) -> list[OperationDispatched]:
    """The dispatch of every leg of `state` that is `dispatched` and has no answer."""
    found: list[Event] = []
    for op in state.operations:
        for leg, current in op.legs():
            if current.status is not LegStatus.DISPATCHED:
                continue
            attempt = current.attempt
            lookup_first = attempt > 1 and not resend_without_lookup(leg_info(op.spec, leg))
            pin = op.pinned_revision if leg is Leg.FORWARD else None
            found.append(_dispatch(op, leg, attempt, lookup_first=lookup_first, pin=pin))
    # Charged as the decision that made them charged them: one rule, ownership.charged_to.
    return [
        e
        for e in charged_to(state.agent_id, state.owner, found)
        if isinstance(e, OperationDispatched)
    ]
