"""What a decider that takes a partition calls again (services.decider.dispatch_host,
`take_over`): the dispatch of every leg its restored states hold `dispatched` with no
answer (transactions.unanswered), as orders rebuilt from the state. The call plan then
judges each as it judges any order: a call begun before is looked up first, and a
destructive one found absent is not sent again. The deterministic simulator (under tests/)
runs this same function when its decider takes a partition over.

Pure: no I/O, no clock.
"""

from collections.abc import Container, Iterable
from datetime import UTC, datetime

from events.envelope import GENESIS_HASH, seal
from events.transaction_events import OperationDispatched
from services.dispatcher.dispatch_order import DispatchOrder
from transactions.state import TransactionState
from transactions.unanswered import unanswered

# A rebuilt dispatch (take-over) has no dispatch time: its envelope says the epoch, so a
# replaying adapter judges the key's retention "too old" and never resends under it
# (services.providers.lookup_strategy.inside_retention errs that way).
_UNDATED = datetime(1970, 1, 1, tzinfo=UTC)


def take_over_orders(states: Iterable[TransactionState], partition: int) -> list[DispatchOrder]:
    """The orders of every unanswered dispatch of `states`, a partition's live states."""
    return [
        rebuilt_order(state, dispatch, partition)
        for state in states
        for dispatch in unanswered(state)
    ]


def not_held(
    orders: Iterable[DispatchOrder], held: Container[tuple[str, str, int]]
) -> list[DispatchOrder]:
    """The orders a kill switch does not hold: `held` is the partition's held dispatches
    (tenant, key, attempt), which the gate resumes once released (services.governance.
    store.held_on). Taken over as well, a held leg would be dispatched beside its resumer."""
    return [
        o for o in orders if (o.envelope.tenant, o.dispatch.op_key, o.dispatch.attempt) not in held
    ]


def rebuilt_order(
    state: TransactionState, dispatch: OperationDispatched, partition: int
) -> DispatchOrder:
    """An order for a dispatch the state still waits on (transactions.unanswered). Its
    envelope carries the event but is no link of the chain (sealed alone, undated): only
    the gate, a hold and the observation read it, by tenant, transaction and event."""
    (envelope,) = seal(
        tenant=state.tenant,
        tx_id=state.tx_id,
        last_seq=0,
        last_hash=GENESIS_HASH,
        events=[dispatch],
        causation_id="take-over",
        occurred_at=_UNDATED,
    )
    return DispatchOrder(envelope, dispatch, partition)
