"""The dispatches a transaction's state still waits on: every leg `dispatched` with no
answer, as the OperationDispatched that dispatched it. A decider that takes a partition
runs these through the call plan again (services.decider.dispatch_host), because a call it
hosts lives in the process that committed the dispatch: that process may have died, or its
transaction with the answer aborted, after the dispatch was committed.

Rebuilt from the state by the rule that made the dispatch (transactions.transaction.
_dispatch): the leg's key, attempt, operation, payload (a compensation's is derived from the
step and its evidence, fixed once the step is confirmed), recorded facts and whether it looks
up first (events.retry_policy.looks_up_first). The agent charged is the current owner when
it is not the submitter (transactions.ownership.charged_to). Redelivery is still judged by
the call plan, never by this: a call begun before is looked up first, and a destructive one
found absent is not sent again.

`waits_on` says whether a state still waits on one given dispatch: a resumed hold
(services.decider.dispatch_host) is not called once its leg was answered or dispatched
again meanwhile, nor once its transaction finished.

Pure: no I/O, no clock.
"""

from events.definition import Leg
from events.legs import LegStatus
from events.transaction_events import Event, OperationDispatched
from transactions.finished import FinishedTransaction
from transactions.ownership import charged_to
from transactions.state import TransactionState
from transactions.transaction import _dispatch


def unanswered(state: TransactionState) -> list[OperationDispatched]:
    """The dispatch of every leg of `state` that is `dispatched` and has no answer."""
    found: list[Event] = []
    for op in state.operations:
        for leg, current in op.legs():
            if current.status is not LegStatus.DISPATCHED:
                continue
            pin = op.pinned_revision if leg is Leg.FORWARD else None
            found.append(_dispatch(op, leg, current.attempt, pin=pin))
    # Charged as the decision that made them charged them: one rule, ownership.charged_to.
    return [
        e
        for e in charged_to(state.agent_id, state.owner, found)
        if isinstance(e, OperationDispatched)
    ]


def waits_on(
    state: TransactionState | FinishedTransaction | None, dispatch: OperationDispatched
) -> bool:
    """Whether `state` still waits on this very dispatch: its leg is `dispatched` under the
    same attempt (not answered, not superseded by a later attempt). A finished transaction
    (its marker) waits on nothing: a hold resumed after a person failed it must not call. No
    state (not known to the process that asks: a partition it does not own) is taken as
    still waiting: the call goes on, on a judgement its claim's give-up bounds."""
    if state is None:
        return True
    if isinstance(state, FinishedTransaction):
        return False
    op = state.operation(dispatch.action)
    leg = op.leg(dispatch.leg) if op else None
    return (
        leg is not None and leg.attempt == dispatch.attempt and leg.status is LegStatus.DISPATCHED
    )
