"""One dispatch order, as the executor of the call plan takes it (services.dispatcher.
executor): the committed event, its envelope and its transaction's partition. Apart from the
executor so that the decider's pure take-over rule (services.decider.take_over), and the
deterministic simulator that runs it, build orders without the executor's I/O.

Pure: no I/O, no clock.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from events.envelope import Envelope
from events.transaction_events import Event, OperationDispatched


@dataclass(frozen=True)
class DispatchOrder:
    """One dispatch to carry out: the committed event, its envelope (the gate reads tenant
    and transaction from it, a hold stores it, a lookup dates the first send by it) and the
    partition of the transaction, where its answers belong."""

    envelope: Envelope
    dispatch: OperationDispatched
    partition: int
    # The trace context of the decision that dispatched it (Kafka headers), if any.
    trace: list[tuple[str, bytes]] | None = None

    @property
    def leg_key(self) -> tuple[str, str, str, int]:
        """The call's identity in `calls_begun`: tenant, key, leg, attempt."""
        d = self.dispatch
        return (self.envelope.tenant, d.op_key, d.leg.value, d.attempt)


def dispatch_orders(
    envelopes: Sequence[Envelope],
    decided: Sequence[Event],
    partition: int,
    trace: list[tuple[str, bytes]] | None = None,
) -> list[DispatchOrder]:
    """The calls one decision orders (transactions.transaction.handled: its envelopes and
    the events they carry): one per OperationDispatched, started once its transaction
    commits. The decider and the simulator's both ask here."""
    return [
        DispatchOrder(envelope, event, partition, trace)
        for envelope, event in zip(envelopes, decided, strict=True)
        if isinstance(event, OperationDispatched)
    ]
