"""Kill switches and held dispatches (services.governance.store's `kill_switches` and
`held_dispatches`), modelled: Postgres tables, so they survive decider crashes.

The rules are the real ones: which engaged switches stop a call is services.governance.
gate's `blocking` (the gate's `dispatch_verdict` asks it, and so does the begin statement,
in its SQL form: calls_begun.begin_many), the plan holds what they stop (call_plan's Hold),
a take-over leaves held legs to the resume (take_over.not_held), and a resumed hold whose
leg was answered meanwhile is not called (transactions.unanswered.waits_on). What the
statements do is restated here, as the SQL does it: a hold is written once per (key,
attempt) and a new hold of it clears its claim; a claim takes the rows no engaged switch
stops whose claim is free or lapsed, for HOLD_LEASE_S, in its claimer's name (a process:
the host's holder), renewed while their calls run; a row is forgotten by its resumer only
while the claim is still that claimer's (a hold written again meanwhile stays, even once
another has claimed it), and a claim whose resumer lost the partition before the call is
released at once, while still that claimer's.
"""

from dataclasses import dataclass, field

from services.dispatcher.dispatch_order import DispatchOrder
from services.dispatcher.gatekeeper import HOLD_LEASE_S
from services.governance.gate import Switch, blocking

HeldKey = tuple[str, int]  # (op_key, attempt); one tenant in the simulation
HOLD_LEASE_MS = int(HOLD_LEASE_S * 1000)


@dataclass
class HeldRow:
    order: DispatchOrder
    # None: free to claim (services.governance.store.claim_released).
    claimed_until: int | None = None
    claimed_by: int | None = None


@dataclass
class SimHolds:
    switches: list[Switch] = field(default_factory=list)
    held: dict[HeldKey, HeldRow] = field(default_factory=dict)
    engaged: int = 0

    def engage(self, agent_id: str | None, operation: str | None) -> None:
        self.engaged += 1
        self.switches.append(Switch(f"ks{self.engaged}", agent_id=agent_id, operation=operation))

    def release(self, index: int) -> None:
        del self.switches[index]

    def blocking(self, agent_id: str, provider: str, operation: str) -> tuple[str, ...]:
        return blocking(self.switches, agent_id, provider, operation)

    def hold(self, order: DispatchOrder) -> None:
        """store.hold: ON CONFLICT ... DO UPDATE SET claimed_until = NULL."""
        key = (order.dispatch.op_key, order.dispatch.attempt)
        row = self.held.get(key)
        if row is None:
            self.held[key] = HeldRow(order)
        else:
            row.claimed_until = row.claimed_by = None

    def held_on(self, partition: int) -> set[tuple[str, str, int]]:
        """store.held_on: claimed or not."""
        return {
            (r.order.envelope.tenant, key, attempt)
            for (key, attempt), r in self.held.items()
            if r.order.partition == partition
        }

    def claimable(self, now: int) -> list[HeldKey]:
        """store.claim_released's rows, oldest first: no engaged switch stops them, and their
        claim is free or lapsed."""
        return [
            key
            for key, r in self.held.items()
            if (r.claimed_until is None or r.claimed_until < now) and not self._stops(r.order)
        ]

    def claim(self, key: HeldKey, now: int, claimer: int) -> None:
        row = self.held[key]
        row.claimed_until, row.claimed_by = now + HOLD_LEASE_MS, claimer

    def renew(self, key: HeldKey, now: int, claimer: int) -> None:
        """store.renew_claims: only a claim still the claimer's."""
        row = self.held.get(key)
        if row is not None and row.claimed_by == claimer:
            row.claimed_until = now + HOLD_LEASE_MS

    def release_claim(self, key: HeldKey, claimer: int) -> None:
        """store.release_claims: only a claim still the claimer's."""
        row = self.held.get(key)
        if row is not None and row.claimed_by == claimer:
            row.claimed_until = row.claimed_by = None

    def forget(self, key: HeldKey, claimer: int) -> None:
        """store.forget_held: only while the claim is the claimer's."""
        row = self.held.get(key)
        if row is not None and row.claimed_by == claimer:
            del self.held[key]

    def lapses(self) -> list[int]:
        return [r.claimed_until for r in self.held.values() if r.claimed_until is not None]

    def _stops(self, order: DispatchOrder) -> bool:
        d = order.dispatch
        return bool(self.blocking(d.agent_id or AGENT, d.provider, d.operation))


# The submitting agent of every simulated transaction (tests.simulation.world).
AGENT = "agent"
