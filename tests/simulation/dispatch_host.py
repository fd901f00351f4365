"""The decider's provider calls (services.decider.dispatch_host), modelled: a call starts
only once the decider transaction that holds its dispatch commits, and each call is the
real plan of services.dispatcher.call_plan (the one services.dispatcher.executor.Call
executes), interpreted here against the simulated provider, clock and `calls_begun` table.
The gate is the real `dispatch_verdict` over the policy document in force (.policies: the
open one, or one whose grants, task and quota the operator changes while faults last) and
the engaged kill switches of .holds; a leg it refuses goes to a person (RequestReview, as
Gatekeeper.review sends it), a quota is reserved by the real `reserve` over the modelled
ledger, and the begin statement checks the switches again as production's does: a call
either stops is held, and resumed (`resume_held`, the gate's loop) once released; a
take-over leaves held legs to it (take_over.not_held), a resumed hold whose leg was
answered meanwhile is not called (unanswered.waits_on), nor one whose call this process is
making (it lets the claim lapse). A call begun while a switch that covers it is engaged is
a Violation (the switch's promise: from its 201 on, no new call of its scope is begun), and
so is a forward call begun though the document its gate judged it under did not allow it,
or under a quota without its key counted.

Where an answer goes, as in production: while the process that made the call owns the
partition, it is queued for the partition's next transaction (lost if that transaction
aborts); once it does not (a member that lost the partition and kept running: a zombie),
it goes to recon.observations, which the owner decides like any observation.

A decider that takes the partition (after a crash, a failed transaction, or from a member
that lost it) runs the real take-over rule (services.decider.take_over.take_over_orders:
every leg its restored states hold unanswered); a call its own process is still making is
made again once it ends (DispatchHost.again), never twice at once. Whether such a call
was begun, and so is looked up first, and whether a destructive one found absent may be
sent again, is the plan's to judge, never this module's. Written as generators that
yield how long they wait.

One caller at a time (services.dispatcher.call_lease, held_leases): the holder of a lease
is the process, modelled as one holder per partition's owner (`holder`: a new one when the
process dies, and when another member takes a partition this one lost, since the simulated
host plays that member too); its begin or claim takes the row's lease, a claim waits while
another holder's is live and takes its own at once (and is given up, nothing sent, once
the partition is not its process's; after a wait it asks the owner's live state again,
Awaited), an apply is not sent once its lease ended and is cut
(unknown) when it ends. A call that ends keeps its lease while its
partition is owned; a revocation lets go of the partition's leases of calls not on the wire
(`let_go`), and a call that ends after its partition went (a zombie's) releases its own.
`wire` holds the applies on their way, each until its answer arrives or its lease ends,
and a second apply of one attempt sent while another is on it is a Violation: the provider
would see two requests of one intent at once.
"""

import random
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

from events.definition import Leg
from events.inputs import OperationObserved, RequestReview
from events.legacy_facts import recorded_facts
from events.policy import PolicyDocument, Quota
from events.transaction_events import OperationDispatched
from services.decider.dispatch_host import RESUME_WAIT_S, RETRY_BACKOFF_S
from services.decider.take_over import not_held, take_over_orders
from services.dispatcher.call_lease import (
    BEGIN_REQUESTS,
    CLAIM_POLL_S,
    CLAIM_REQUESTS,
    held_s,
    lease_s,
)
from services.dispatcher.call_plan import (
    Apply,
    Awaited,
    Balance,
    Begin,
    Claim,
    Gate,
    Hold,
    Lookup,
    Report,
    Review,
    Sleep,
    Turn,
    WasBegun,
    call_plan,
    dispatch_observation,
)
from services.dispatcher.calls_begun import Claimed
from services.dispatcher.dispatch_order import DispatchOrder
from services.dispatcher.gatekeeper import review_request
from services.governance.gate import Verdict, amount_of, dispatch_verdict, quotas_for
from services.providers.classify import classify_lookup, classify_response, unreachable
from services.providers.sandbox_operations import SANDBOX_OPERATIONS
from transactions.finished import FinishedTransaction
from transactions.state import TransactionState
from transactions.unanswered import waits_on

from .calls_begun import SimCallsBegun
from .clock import Clock
from .holds import AGENT, HeldKey, SimHolds
from .invariants import Violation
from .policies import SimPolicy
from .provider import Provider

Wait = Generator[int, None, None]  # yields the milliseconds it sleeps

# The modelled provider answers within 400 ms (Apply below): its calls' leases are sized as
# production sizes them (call_lease), for a provider timeout of a quarter of a second, or
# in the schedules of .long_leases for production's (5 s, or a slow provider's 30 s).
PROVIDER_TIMEOUT_S = 0.25


class Unavailable(Exception):
    """Postgres away, or Kafka refusing a zombie's answer: a request of the plan failed
    (DispatchHost._carry's `except Exception`)."""


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


@dataclass
class Running:
    order: DispatchOrder
    due: int
    # The process making it (SimDispatchHost.holder).
    holder: int
    # False once the process making the call lost the partition (see lose_partition).
    owned: bool = True
    # A resumed hold's row (DispatchHost._resume_one), and whether it still waits for this
    # process's own call of its attempt to end (not `running` until then).
    held: HeldKey | None = None
    waiting: bool = False
    # What the operator's words said of a forward leg at the gate that let it through (why
    # it was not allowed, or None), and whether that gate counted it against a quota.
    refused_at_gate: str | None = None
    quota_at_gate: bool = False
    # When its process, stopping cleanly, ends (DispatchHost.leave: LEAVE_WAIT_S after the
    # stop); None while it runs on.
    deadline: int | None = None
    # Polling a claim while another holder's lease is live (call_plan.Claim, HELD): it
    # can send nothing before it is taken, and then asks the live state again (Awaited).
    claiming: bool = False
    steps: Wait = field(init=False)

    def wakes(self) -> int:
        return self.due if self.deadline is None else min(self.due, self.deadline)


@dataclass
class SimDispatchHost:
    provider: Provider
    clock: Clock
    begun: SimCallsBegun
    # The owner's next transaction of the call's partition (Decider._answered), and that
    # partition of recon.observations.
    answered: Callable[[int, OperationObserved], object]
    forward: Callable[[int, OperationObserved], object]
    holds: SimHolds
    # The owner's latest decided state of a transaction (Decider._current).
    current: Callable[[int, str, str], TransactionState | FinishedTransaction | None]
    policy: SimPolicy
    # The gate's RequestReview, to the transaction's partition of recon.commands.
    review: Callable[[RequestReview], object]
    # A call begun (its row written: tx_id, op_key, leg, attempt): the monitor's check of
    # the transaction's state, and the approvals' of the person's.
    on_begun: Callable[[str, str, Leg, int], object]
    calls: list[Running] = field(default_factory=list)
    # The owner's calls a take-over found running: made again once they end.
    again: dict[tuple[str, str, str, int], DispatchOrder] = field(default_factory=dict)
    # Applies on their way, per (op_key, leg, attempt): holder -> when its lease ends.
    wire: dict[tuple[str, str, int], dict[int, int]] = field(default_factory=dict)
    holders: int = 0
    # Each partition owner's holder id (HeldLeases.holder).
    holder: dict[int, int] = field(default_factory=dict)
    # The leases taken (HeldLeases): row -> (partition, holder, until); and the rows whose
    # call is on the wire, with their holder.
    leased: dict[tuple[str, str, int], tuple[int, int, int]] = field(default_factory=dict)
    calling: set[tuple[tuple[str, str, int], int]] = field(default_factory=set)
    provider_timeout_s: float = PROVIDER_TIMEOUT_S
    # The chance that a request of a plan fails (.carry's schedules), and their generator.
    fail_rate: float = 0.0
    fails: random.Random | None = None

    def submit(self, orders: Iterable[DispatchOrder]) -> None:
        """Starts the calls of committed dispatches, but not one this process is making
        already (DispatchHost.submit: never two calls of one attempt from one process)."""
        running = self._running()
        for order in orders:
            if order.leg_key in running:
                continue
            running.add(order.leg_key)
            call = Running(order, self.clock.now, self._holder(order.partition))
            call.steps = self._carry(call)
            self.calls.append(call)

    def take_over(self, states: Iterable[TransactionState], partition: int) -> None:
        """After the partition's restore: what the restored live states wait on, again;
        a call still running, once it ends."""
        # DispatchHost.fenced: the take's fence, for the claims of the processes that had
        # the partition before (written here, after the restore, not at the producer's
        # start: no claim runs between the two in the simulation).
        self.begun.write_fence(partition, self._holder(partition))
        orders = take_over_orders(states, partition)
        running = self._running()
        self.again.update((o.leg_key, o) for o in orders if o.leg_key in running)
        held = self.holds.held_on(partition)
        self.submit(o for o in not_held(orders, held) if o.leg_key not in running)

    def _running(self) -> set[tuple[str, str, str, int]]:
        """DispatchHost.running: the calls of the owned partitions, resumed holds too."""
        return {c.order.leg_key for c in self.calls if c.owned and not c.waiting}

    def resume_held(self) -> None:
        """The gate's loop (Gatekeeper.run, DispatchHost._resume): claim the held dispatches
        no engaged switch stops any more and resume each (a crash lets their claims lapse)."""
        now = self.clock.now
        for key in self.holds.claimable(now):
            order = self.holds.held[key].order
            call = Running(order, now, self._holder(order.partition), held=key, waiting=True)
            self.holds.claim(key, now, call.holder)
            call.steps = self._resumed(call)
            self.calls.append(call)

    @staticmethod
    def _beside(resumed: Running, other: Running) -> bool:
        """Whether `other` is a call of the resumed hold's attempt in its process's
        `running` (one holder per process and partition: after a revocation both run on
        there, zombies, and it still waits)."""
        return (
            other is not resumed
            and not other.waiting
            and other.holder == resumed.holder
            and other.order.leg_key == resumed.order.leg_key
        )

    def _resumed(self, running: Running) -> Wait:
        """DispatchHost._resume_one: once this process's own call of the attempt ended, not
        called if the owner's state no longer waits on it (forgotten when this ends), else
        its plan again; not called either, and its claim released, once the partition was
        revoked (`lose_partition`)."""
        order = running.order
        yield 0
        while running.owned and any(self._beside(running, c) for c in self.calls):
            yield _ms(RESUME_WAIT_S)
        if not running.owned:
            # Revoked since the claim: left to the partition's owner (the host's new holder
            # claims it at its next look), the claim released at once, nothing called.
            assert running.held is not None
            self.holds.release_claim(running.held, running.holder)
            running.held = None  # nothing to renew or forget
            return
        state = self.current(order.partition, order.envelope.tenant, order.envelope.tx_id)
        if not waits_on(state, order.dispatch):
            return
        running.waiting = False
        yield from self._carry(running)

    def due(self) -> list[int]:
        return [i for i, c in enumerate(self.calls) if c.wakes() <= self.clock.now]

    def leave(self, holders: set[int], wait_ms: int) -> None:
        """A clean stop (DispatchHost.leave), once its partitions were revoked: the calls of
        the stopping process (`holders`) get `wait_ms` to end, then end with the process,
        wherever they are: a lease or a claim they hold lapses, an apply on the wire stays
        on it until its lease ends."""
        for running in self.calls:
            if running.holder in holders:
                running.deadline = self.clock.now + wait_ms

    def resume(self, index: int) -> None:
        running = self.calls[index]
        if running.deadline is not None and self.clock.now >= running.deadline:
            del self.calls[index]  # its process is gone
            return
        if running.held is not None:  # Gatekeeper._resume_leased renews while it runs
            self.holds.renew(running.held, self.clock.now, running.holder)
        try:
            running.due = self.clock.now + next(running.steps)
        except StopIteration:
            del self.calls[index]
            if running.held is not None and running.owned:
                self.holds.forget(running.held, running.holder)
            elif running.held is not None:
                # Its partition went during the call: the new owner's take-over left the
                # held leg to this resume, whose answers may not have settled it (DispatchHost.
                # _carry): released, so the owner claims it and judges it by its own state.
                self.holds.release_claim(running.held, running.holder)
            again = self.again.pop(running.order.leg_key, None)
            if again is not None and running.owned:
                self.submit([again])

    def crash(self) -> None:
        """The owner's process dies, and its calls with it, every partition's (a zombie's
        run on)."""
        self.calls = [c for c in self.calls if not c.owned]
        self.again.clear()
        self.holder.clear()  # a new process: new holders, nothing remembered
        self.leased.clear()

    def lose_partition(self, partition: int, pause_ms: int) -> None:
        """The group gave the partition to another member while this one kept running (a
        long pause, a network partition): its calls go on after the pause as zombies,
        answering to recon.observations with their own attempt numbers, while the new
        owner takes the partition over. What the decider's attempt check is for. The
        process's calls of its other partitions are still its own."""
        for running in self.calls:
            if running.owned and running.order.partition == partition:
                running.owned = False
                running.due += pause_ms
        # The old owner's: it no longer owns the partition (DispatchHost._carry asks).
        self.again = {k: o for k, o in self.again.items() if o.partition != partition}
        # Its next owner is another process.
        self.holder.pop(partition, None)

    def let_go(self, partition: int) -> None:
        """A revocation (DispatchHost.let_go): the owner's leases of the partition's calls
        that are not on the wire are released."""
        holder = self.holder.get(partition)
        for row, (p, h, until) in list(self.leased.items()):
            if p == partition and h == holder and until > self.clock.now:
                if (row, h) not in self.calling:
                    self.begun.release(row, h)
                    del self.leased[row]

    def _holder(self, partition: int) -> int:
        if partition not in self.holder:
            self.holders += 1
            self.holder[partition] = self.holders
        return self.holder[partition]

    def _carry(self, running: Running) -> Wait:
        """DispatchHost._carry: the plan, made again from its start after a failed request
        (RETRY_BACKOFF_S) while the partition is this process's; once it is not, left to
        its owner (a resumed hold's claim released); a resumed hold, after the back-off,
        released for the owner's gate loop to claim and judge again, not retried here."""
        attempt = 0
        while True:
            try:
                yield from self._call(running)
                return
            except Unavailable:
                if running.owned:
                    yield _ms(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])
                    attempt += 1
                if not running.owned or running.held is not None:
                    if running.held is not None:
                        self.holds.release_claim(running.held, running.holder)
                        running.held = None  # nothing to renew or forget
                    return

    def _fail(self) -> bool:
        # While faults last, as the provider's (its `faulty`): a database back for good after.
        return (
            self.fails is not None and self.provider.faulty and self.fails.random() < self.fail_rate
        )

    def _call(self, running: Running) -> Wait:
        yield 0  # the call starts on its own step, so it interleaves with everything else
        envelope, dispatch = running.order.envelope, running.order.dispatch
        key, leg, attempt = dispatch.op_key, dispatch.leg, dispatch.attempt
        row = (key, leg.value, attempt)
        holder = running.holder
        held_until: int | None = None  # this holder's own bound, while it holds the lease
        plan = call_plan(dispatch)
        answer: Any = None

        def took(until: int) -> None:
            self.leased[row] = (running.order.partition, holder, until)
            self.calling.add((row, holder))

        def ended() -> None:
            if (row, holder) not in self.calling:
                return
            self.calling.discard((row, holder))
            if not running.owned:  # its partition went meanwhile: released now
                self.begun.release(row, holder)
                self.leased.pop(row, None)

        while True:
            try:
                request = plan.send(answer)
            except StopIteration:
                ended()
                return
            answer = None
            match request:
                case Gate():
                    answer = self._gate(running)
                    yield 0  # a switch may be engaged between the gate and the begin
                case WasBegun():
                    if self._fail():
                        raise Unavailable
                    answer = self.begun.was_begun(key, leg, attempt)
                    yield 0  # another call may begin meanwhile
                case Lookup():
                    answer = classify_lookup(*self.provider.lookup(self.clock.now, key))
                case Balance():
                    answer = (404, {"error": "no_such_charge"})  # the sandbox keeps none
                case Begin():
                    now = self.clock.now
                    until = now + _ms(lease_s(self.provider_timeout_s, BEGIN_REQUESTS))
                    covering = self.holds.blocking(
                        dispatch.agent_id or AGENT, dispatch.provider, dispatch.operation
                    )
                    answer = self.begun.begin(
                        envelope.tx_id,
                        key,
                        leg,
                        attempt,
                        holder,
                        until,
                        covering,
                        running.order.partition,
                    )
                    if answer.written:
                        self._begun_unswitched(row, dispatch.operation)
                        self._begun_granted(running, row)
                        self.on_begun(envelope.tx_id, key, leg, attempt)
                        held_until = now + _ms(held_s(self.provider_timeout_s, BEGIN_REQUESTS))
                        took(until)
                    yield 0  # a crash may fall between the row and the call
                    if self._fail():  # the statement's answer lost: the row may be written
                        ended()
                        raise Unavailable
                case Claim():
                    if self._fail():
                        raise Unavailable
                    answer = Turn.AT_ONCE
                    while True:
                        now = self.clock.now
                        until = now + _ms(lease_s(self.provider_timeout_s, CLAIM_REQUESTS))
                        claimed = self.begun.claim(row, holder, now, until, running.order.partition)
                        if claimed is Claimed.TAKEN:
                            held_until = now + _ms(held_s(self.provider_timeout_s, CLAIM_REQUESTS))
                            took(until)
                        if claimed is not Claimed.HELD and claimed is not Claimed.SUPERSEDED:
                            break
                        # Call.claim: no longer its to make (DispatchHost.owns), or the
                        # partition's owner took it after this process (its fence), a resumed
                        # hold's too: its claim is released for the new owner's loop
                        # (DispatchHost._settle), which judges it by the live state.
                        if not running.owned or claimed is Claimed.SUPERSEDED:
                            answer = Turn.GIVEN_UP
                            if running.held is not None:
                                self.holds.release_claim(running.held, running.holder)
                                running.held = None  # nothing to renew or forget
                            break
                        answer = Turn.WAITED
                        running.claiming = True
                        yield _ms(CLAIM_POLL_S)
                        running.claiming = False
                case Awaited():
                    # DispatchHost._awaited: the owner's live state; none known to a process
                    # that lost the partition (Decider._current), so that one goes on.
                    order = running.order
                    state = (
                        self.current(order.partition, envelope.tenant, envelope.tx_id)
                        if running.owned
                        else None
                    )
                    answer = waits_on(state, dispatch)
                case Hold():
                    self.holds.hold(running.order)
                case Apply():
                    assert held_until is not None, "no row is ever purged in the simulation"
                    if self.clock.now >= held_until:
                        answer = unreachable(TimeoutError("the call's lease ended before it"))
                    else:
                        self._send(row, holder, held_until)
                        sent = self.provider.apply(
                            self.clock.now, dispatch.operation, key, dispatch.payload
                        )
                        yield self.provider.rng.randint(5, 400)  # the response travels back
                        self.wire[row].pop(holder, None)
                        if sent is None or self.clock.now > held_until:
                            answer = unreachable(TimeoutError("no answer in time"))
                        else:
                            answer = classify_response(*sent)
                    ended()
                    held_until = None
                case Sleep(seconds=seconds):
                    yield int(seconds * 1000)
                case Report():
                    if not running.owned and self._fail():  # Kafka refused it (inline: no I/O)
                        raise Unavailable
                    observed = dispatch_observation(envelope, dispatch, request, self.clock.at())
                    (self.answered if running.owned else self.forward)(
                        running.order.partition, observed
                    )
                case Review():
                    raise AssertionError("no precondition can fail without balances")

    def _gate(self, running: Running) -> bool:
        """Gatekeeper.clear: the real verdict over the document in force, the task the
        intent names and the engaged switches; held or sent to review, not called; then
        the quota's reservation (store.reserve_quota, modelled by .policies)."""
        order = running.order
        dispatch = order.dispatch
        agent_id = dispatch.agent_id or AGENT
        policy = self.policy.view()
        info = SANDBOX_OPERATIONS.get(dispatch.operation)
        amount = amount_of(dispatch.payload, info.amount_field if info else "amount")
        forward = dispatch.leg is Leg.FORWARD
        decision = dispatch_verdict(
            policy,
            self.holds.switches,
            agent_id=agent_id,
            provider=dispatch.provider,
            operation=dispatch.operation,
            forward=forward,
            side_effect=recorded_facts(dispatch.facts, dispatch.operation).side_effect,
            task_id=self.policy.task_id,
            amount=amount,
            now=self.clock.at(),
        )
        if decision.verdict is Verdict.HOLD:
            self.holds.hold(order)
            return False
        if decision.verdict is Verdict.REVIEW:
            self._review(order, decision.reason)
            return False
        running.refused_at_gate = (
            self.policy.refusal(dispatch.operation, dispatch.payload) if forward else None
        )
        # In the world's words, not quotas_for's: a quota on the operation was in force.
        running.quota_at_gate = self.policy.quota_covers(dispatch.operation)
        quotas = self._quotas(policy, agent_id, dispatch)
        if quotas:
            assert amount is not None, "every simulated amount is an integer"
            if self.policy.reserve(dispatch.operation, dispatch.op_key, amount, quotas):
                self._review(order, "quota_exceeded")
                return False
        return True

    def _quotas(
        self, policy: PolicyDocument, agent_id: str, dispatch: OperationDispatched
    ) -> tuple[Quota, ...]:
        """Gatekeeper._clear's quotas: an undo leg's too (a compensation is a call to a
        provider like any other)."""
        return quotas_for(policy, agent_id, dispatch.operation)

    def _review(self, order: DispatchOrder, reason: str) -> None:
        """Gatekeeper.review: a person decides instead of the call."""
        self.review(review_request(order.envelope, order.dispatch, reason, self.clock.at()))

    def _begun_granted(self, running: Running, row: tuple[str, str, int]) -> None:
        """A call begun: the gate that let it through judged it under a document in force
        within its view's bound (production's view is at most MAX_STALENESS_S old; the
        simulated one exact, or as old in .policies' lagging schedules), so the operator's
        words at some instant of that bound allowed it; and if a quota covered it
        throughout, its key was counted (never begun past a full quota)."""
        if running.refused_at_gate is not None:
            raise Violation(
                f"{row[0]} {row[1]} attempt {row[2]}: begun though, at its gate, "
                f"{running.order.dispatch.operation}: {running.refused_at_gate}"
            )
        if running.quota_at_gate and row[0] not in self.policy.claims:
            raise Violation(
                f"{row[0]} {row[1]} attempt {row[2]}: begun under a quota without being counted"
            )

    def _begun_unswitched(self, row: tuple[str, str, int], operation: str) -> None:
        """A call begun: no engaged switch may cover it. The promise, stated on its own for
        the scopes the world engages (tests.simulation.world: the tenant, the agent, or an
        operation), not asked of the rule under test (gate.blocking)."""
        for switch in self.holds.switches:
            if switch.operation in (None, operation):
                raise Violation(
                    f"{row[0]} {row[1]} attempt {row[2]}: begun while kill switch "
                    f"{switch.switch_id} (operation {switch.operation}) is engaged"
                )

    def _send(self, row: tuple[str, str, int], holder: int, held_until: int) -> None:
        """An apply leaves: none other of its attempt may be on the wire (one that died or
        paused is, until its lease ends)."""
        now = self.clock.now
        others = [h for h, until in self.wire.get(row, {}).items() if until > now]
        if others:
            raise Violation(
                f"{row[0]} {row[1]} attempt {row[2]}: sent while another call of it is on "
                f"the wire (holders {others} and {holder}, at {now} ms)"
            )
        self.wire.setdefault(row, {})[holder] = held_until
