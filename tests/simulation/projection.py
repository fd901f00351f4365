"""The projector: the real projection fold (projections.view.apply) over recon.events,
lagging behind the log by however many steps the schedule leaves it. The pull
reconciler's candidates and the operator read it, as they read Postgres."""

from collections.abc import Callable
from dataclasses import dataclass, field

from events.definition import Leg, OpStatus
from events.envelope import Envelope
from events.legs import IN_FLIGHT
from projections.view import TxView, apply
from reconcilers.pull import Candidate, maybe_sent

from .kafka import Consumer

# The operation states whose forward leg reconcilers.store.in_flight_legs selects.
OPEN = frozenset(OpStatus(status.value) for status in IN_FLIGHT)


@dataclass
class SimProjection:
    events: Consumer[Envelope]
    views: dict[tuple[str, str], TxView] = field(default_factory=dict)
    # The compensation's operation is on its dispatch event, not in the operations table.
    compensation_operation: dict[str, str] = field(default_factory=dict)
    reviewed: bool = False  # whether any review was ever opened (saves the operator a scan)

    def consume(self) -> None:
        _, envelope = self.events.take()
        key = (envelope.tenant, envelope.tx_id)
        self.views[key] = apply(self.views.get(key), envelope)
        if envelope.type == "OperationNeedsReview":
            self.reviewed = True
        if envelope.type == "OperationDispatched" and envelope.data.get("leg") == "compensation":
            self.compensation_operation[envelope.data["op_key"]] = envelope.data["operation"]

    def in_flight(self, was_begun: Callable[[str, Leg, int], bool]) -> list[Candidate]:
        """What reconcilers.store.in_flight_legs selects (no kill switch holds a dispatch
        here), by its rule `maybe_sent` and the calls begun (`was_begun`)."""
        legs: list[Candidate] = []
        for view in self.views.values():
            for op in view.operations:
                key, attempt = op.op_key, op.attempts
                if op.state in OPEN and maybe_sent(op.state, was_begun(key, Leg.FORWARD, attempt)):
                    legs.append(
                        Candidate(
                            view.tenant,
                            view.tx_id,
                            op.action,
                            Leg.FORWARD,
                            op.op_key,
                            op.attempts,
                            op.provider,
                            op.operation,
                            op.updated_at,
                        )
                    )
                compensation, comp_key = op.compensation, op.compensation_key
                if (
                    compensation
                    and compensation.in_flight
                    and comp_key is not None
                    and maybe_sent(
                        compensation.status,
                        was_begun(comp_key, Leg.COMPENSATION, compensation.attempt),
                    )
                ):
                    legs.append(
                        Candidate(
                            view.tenant,
                            view.tx_id,
                            op.action,
                            Leg.COMPENSATION,
                            comp_key,
                            compensation.attempt,
                            op.provider,
                            self.compensation_operation.get(comp_key, op.operation),
                            op.updated_at,
                        )
                    )
        return legs
