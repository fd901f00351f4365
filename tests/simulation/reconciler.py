"""The pull reconciler: the real planner (reconcilers.pull.plan) on the projection's
in-flight legs, its lookups classified by the real `classify_lookup`, its escalations
sent as RequestReview, its observations built by the real `observation`. Leases
(Postgres in production) survive its crashes."""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from events.definition import Leg
from events.inputs import DeciderInput, RequestReview, Source
from events.observation import observation
from reconcilers.pull import (
    REVIEW_REASON,
    Escalate,
    Lease,
    LeaseKey,
    Lookup,
    Policy,
    observation_id,
    plan,
    review_request_id,
)
from services.providers.classify import classify_lookup

from .clock import Clock
from .projection import SimProjection
from .provider import Provider

POLICY = Policy(
    after=timedelta(seconds=5),
    budget=4,
    backoff=timedelta(seconds=1),
    backoff_max=timedelta(seconds=8),
    review_retry=timedelta(seconds=60),
)
TICK_MS = 1000


@dataclass
class SimReconciler:
    projection: SimProjection
    provider: Provider
    clock: Clock
    send: Callable[[DeciderInput], None]
    # Whether a call has its `calls_begun` row (Postgres, read by the candidates' query).
    was_begun: Callable[[str, Leg, int], bool]
    leases: dict[LeaseKey, Lease] = field(default_factory=dict)
    last_tick: int = -TICK_MS
    # While faults last: the chance that the process dies between claiming a step in its
    # lease (Postgres) and sending its message, so the send is lost.
    lose_rate: float = 0.0

    def due(self) -> bool:
        return self.clock.now - self.last_tick >= TICK_MS

    def tick(self) -> None:
        self.last_tick = self.clock.now
        now = self.clock.at()
        for step in plan(self.projection.in_flight(self.was_begun), self.leases, now, POLICY):
            leg = step.leg
            lease_key = (leg.op_key, leg.attempt)
            if isinstance(step, Lookup):
                seen = classify_lookup(*self.provider.lookup(self.clock.now, leg.op_key))
                self.leases[lease_key] = Lease(leg.op_key, leg.attempt, step.n, step.next_at)
                if self._lost():
                    continue
                self.send(
                    observation(
                        message_id=observation_id(leg.op_key, leg.attempt, step.n),
                        tenant=leg.tenant,
                        tx_id=leg.tx_id,
                        action=leg.action,
                        op_key=leg.op_key,
                        attempt=leg.attempt,
                        source=Source.LOOKUP,
                        seen=seen,
                        observed_at=now,
                    )
                )
            elif isinstance(step, Escalate):
                self.leases[lease_key] = Lease(
                    leg.op_key, leg.attempt, step.lookups, now, True, now
                )
                if self._lost():
                    continue
                self.send(
                    RequestReview(
                        message_id=review_request_id(leg.op_key, leg.attempt),
                        tenant=leg.tenant,
                        tx_id=leg.tx_id,
                        action=leg.action,
                        leg=leg.leg,
                        attempt=leg.attempt,
                        reason=REVIEW_REASON,
                        issued_at=now,
                    )
                )

    def _lost(self) -> bool:
        return self.provider.faulty and self.provider.rng.random() < self.lose_rate
