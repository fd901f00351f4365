"""One schedule: the processes wired together, a seeded scheduler that picks what
happens next, faults and crashes until they heal, and the invariants after every step.

Everything random comes from one `random.Random(seed)`, and nothing reads a real clock or
iterates a set or dict whose order could vary, so a seed replays the same schedule: the
same steps and the same events, byte for byte.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from events.definition import Compensation, Leg, OperationKind, OperationSpec
from events.envelope import Envelope
from events.inputs import DeciderInput, OperationObserved, SubmitTransaction
from events.keys import compensation_key, op_key
from projections.view import OpView, TxView
from reconcilers.webhook_intake import MatchedOperation
from services.decider.dispatch_host import LEAVE_WAIT_S
from services.decider.restore import Stored
from services.providers.sandbox_operations import SANDBOX_OPERATIONS

from . import long_leases
from .approvals import SimApprovals
from .calls_begun import SimCallsBegun
from .clock import Clock
from .decider import SimDecider
from .dispatch_host import SimDispatchHost
from .holds import AGENT, SimHolds
from .invariants import Monitor, Violation
from .kafka import Consumer, Log
from .people import Operator, abort
from .policies import SimPolicy
from .projection import SimProjection
from .provider import KEY_TTL_MS, Provider
from .reconciler import TICK_MS, SimReconciler
from .saga import SimSaga
from .webhooks import SimWebhooks

TENANT = "demo"
# Once faults heal, every transaction must settle within this many steps.
LIVENESS_STEPS = 4000
DESTRUCTIVE_SHARE = 0.2
# The kill switches an operator engages: the whole tenant, the agent, or one operation.
SWITCH_SCOPES: tuple[tuple[str | None, str | None], ...] = (
    (None, None),
    (AGENT, None),
    (None, "payments.charge"),
    (None, "waitlist.promote"),
    (None, "email.send"),
)


def transaction(rng: random.Random, tx_id: str) -> SubmitTransaction:
    specs: list[OperationSpec] = []

    def add(action: str, kind: OperationKind, operation: str, decline: bool) -> None:
        key = op_key(
            tenant=TENANT, environment="sim", provider="sandbox", tx_id=tx_id, action=action
        )
        # Recorded on the spec as the intake records them (services.intake.submission).
        info = SANDBOX_OPERATIONS[operation]
        compensation = (
            Compensation(
                operation=info.compensation,
                facts=SANDBOX_OPERATIONS[info.compensation].facts,
            )
            if info.compensation and kind is OperationKind.STEP
            else None
        )
        payload: dict[str, object] = {"amount": 100 + len(specs)}
        if decline:
            payload["decline"] = True
        specs.append(
            OperationSpec(
                action=action,
                kind=kind,
                provider="sandbox",
                operation=operation,
                payload=payload,
                op_key=key,
                facts=info.facts,
                compensation=compensation,
                compensation_key=compensation_key(key) if compensation else None,
            )
        )

    for i in range(rng.randint(1, 3)):
        # Now and then a destructive step, never sent twice by a machine (its undo a write).
        operation = "waitlist.promote" if rng.random() < DESTRUCTIVE_SHARE else "payments.charge"
        add(f"s{i}", OperationKind.STEP, operation, rng.random() < 0.15)
    if rng.random() < 0.5:
        add("notify", OperationKind.ON_COMMIT, "email.send", False)
    if rng.random() < 0.3:
        add("sorry", OperationKind.ON_COMPENSATED, "email.send", False)
    return SubmitTransaction(
        message_id=f"submit:{tx_id}",
        tenant=TENANT,
        tx_id=tx_id,
        agent_id=AGENT,
        fingerprint="f" * 64,
        operations=tuple(specs),
        issued_at=Clock().at(),
    )


@dataclass
class World:
    seed: int
    # A provider that judges a declined key's resend afresh (provider.py): not in the
    # default schedules, where a zombie's begin before its partition's new fence can still
    # send (docs/testing.md, "A provider that forgets its declines").
    afresh: bool = False
    rng: random.Random = field(init=False)
    clock: Clock = field(default_factory=Clock)
    trace: list[str] = field(default_factory=list)
    monitor: Monitor = field(default_factory=Monitor)

    def __post_init__(self) -> None:
        rng = self.rng = random.Random(self.seed)
        self.events: Log[Envelope] = Log()
        self.provider = Provider(
            rng=rng,
            call_fault_rate=rng.choice([0.0, 0.2, 0.5]),
            lookup_fault_rate=rng.choice([0.0, 0.3, 0.7]),
            hook_fault_rate=rng.choice([0.0, 0.5]),
        )
        self.provider.afresh = self.afresh
        self.crash_rate = rng.choice([0.0, 0.01, 0.04])
        self.abort_rate = rng.choice([0.0, 0.01])
        self.heal_at = rng.randint(5, 120)
        # Kill switches in two schedules in three, released when faults heal.
        self.switch_rate = rng.choice([0.0, 0.02, 0.04])
        # Clean stops in one schedule in three, drawn apart so the others are unchanged.
        self.stop_rate = 0.01 if random.Random(f"stop:{self.seed}").random() < 1 / 3 else 0.0
        self.holds = SimHolds()
        # Production's call leases in one schedule in eight, drawn apart likewise.
        self.long_leases = long_leases.drawn(self.seed)
        if self.long_leases is not None:
            self.heal_at += self.long_leases.longer_faults
        self.policy = SimPolicy.drawn(self.clock, self.seed)
        # Steps that wait for a person's approval in one schedule in four, drawn apart.
        self.approvals = SimApprovals.drawn(self.clock, self.seed)
        calls_begun = SimCallsBegun(self._abort_stops)
        self.host = SimDispatchHost(
            self.provider,
            self.clock,
            calls_begun,
            self._answered,
            self._forward,
            self.holds,
            self._current,
            self.policy,
            self.send_input,
            self._begun,
        )
        if self.long_leases is not None:
            self.host.provider_timeout_s = self.long_leases.provider_timeout_s
        # Failing requests (DispatchHost._carry's error path) in one schedule in six, drawn
        # apart likewise.
        fails = random.Random(f"carry:{self.seed}")
        if fails.random() < 1 / 6:
            self.host.fail_rate, self.host.fails = fails.choice([0.05, 0.2]), fails
        self.projection = SimProjection(Consumer(self.events))
        self.saga = SimSaga(Consumer(self.events), self.send_input)
        self.reconciler = SimReconciler(
            self.projection, self.provider, self.clock, self.send_input, calls_begun.was_begun
        )
        self.reconciler.lose_rate = rng.choice([0.0, 0.2])
        self.operator = Operator(self.provider, self.clock, rng)
        self.resolved: set[str] = set()
        self.submits = [
            self.approvals.submitted(transaction(rng, f"tx-{n}"))
            for n in range(rng.choice([1, 1, 2]))
        ]
        # Two transactions share a partition or have one each: one decider process owns
        # both partitions (one host makes their calls, a crash takes both), each with its
        # own inputs, transactions, changelog and take-over.
        partitions = rng.choice([1, 2]) if len(self.submits) > 1 else 1
        self.partition_of = {tx.tx_id: n % partitions for n, tx in enumerate(self.submits)}
        self.commands: list[Log[DeciderInput]] = [Log() for _ in range(partitions)]
        self.observations: list[Log[DeciderInput]] = [Log() for _ in range(partitions)]
        self.deciders = [
            SimDecider(
                p,
                Consumer(self.commands[p]),
                Consumer(self.observations[p]),
                self.events,
                self.on_event,
                self.host,
                [],
                self.clock,
                self.monitor.on_decided,
            )
            for p in range(partitions)
        ]
        # Each partition's steps, named with an "@p" after the first partition's.
        self.partitions = [
            (
                d,
                f"@{d.partition}" if d.partition else "",
                partial(d.consume, True),
                partial(d.consume, False),
            )
            for d in self.deciders
        ]
        matched: dict[str, MatchedOperation] = {}
        for tx in self.submits:
            self.monitor.expect(tx.tx_id, tx.operations)
            self.send_input(tx)
            for s in tx.operations:
                matched[s.op_key] = MatchedOperation(TENANT, tx.tx_id, s.action, s.op_key)
                if s.compensation_key:
                    matched[s.compensation_key] = MatchedOperation(
                        TENANT, tx.tx_id, s.action, s.compensation_key
                    )
        self.webhooks = SimWebhooks(self.provider, self.clock, rng, matched, self.send_input)
        self.aborted: set[str] = set()
        self.step_keys = {
            s.op_key for tx in self.submits for s in tx.operations if s.kind is OperationKind.STEP
        }
        self.applied_seen = 0
        self.sent_seen = 0

    # --- wiring ---------------------------------------------------------------------

    def on_event(self, envelope: Envelope) -> None:
        self.monitor.on_event(envelope)
        self.approvals.on_event(envelope)

    def send_input(self, message: DeciderInput) -> None:
        """To the partition of the message's transaction (events.keys.partition_key)."""
        partition = self.partition_of[message.tx_id]
        if message.type == "OperationObserved":
            self.observations[partition].append(message)
        else:
            self.commands[partition].append(message)

    def _answered(self, partition: int, answer: OperationObserved) -> None:
        self.deciders[partition].answers.append(answer)

    def _forward(self, partition: int, answer: OperationObserved) -> None:
        self.observations[partition].append(answer)

    def _begun(self, tx_id: str, key: str, leg: Leg, attempt: int) -> None:
        self.monitor.on_begun(tx_id, key, leg)
        self.approvals.on_begun(key, leg, attempt)

    def _current(self, partition: int, _tenant: str, tx_id: str) -> Stored | None:
        return self.deciders[partition].stored((TENANT, tx_id))

    def decider_of(self, tx_id: str) -> SimDecider:
        return self.deciders[self.partition_of[tx_id]]

    # --- the schedule -----------------------------------------------------------------

    def run(self) -> None:
        self._until_quiet(first_step=0)
        if self.rng.random() < 0.5:
            self._much_later()
            self._until_quiet(first_step=len(self.trace))
        for tx in self.submits:
            state = self.decider_of(tx.tx_id).state_of((TENANT, tx.tx_id))
            assert state is not None
            self.monitor.final(tx.tx_id, state, self.provider.applies)

    def _much_later(self) -> None:
        """A day later (every provider key expired): the decider restarts from its
        changelog (finished markers; its take-over finds nothing unanswered), and the
        agent submits again."""
        self.trace.append("much_later")
        self.clock.now += KEY_TTL_MS + 1
        self._crash_decider()
        for tx in self.submits:
            self.send_input(tx)

    def _until_quiet(self, first_step: int) -> None:
        step = first_step
        while True:
            step += 1
            healed = step > self.heal_at
            if healed and self.provider.faulty:
                self.provider.faulty = False
                self.trace.append("heal")
            if healed and self.holds.switches:
                self.holds.switches.clear()
                self.trace.append("release_switches")
            if healed and self.policy.heal():
                self.trace.append("policy_healed")
            if healed and self._quiet():
                return
            if healed and step - max(self.heal_at, first_step) > LIVENESS_STEPS:
                raise Violation(f"stuck {LIVENESS_STEPS} steps after faults healed: {self._why()}")
            name, action = self._pick(faulty=not healed)
            self.trace.append(name)
            action()
            self._check_provider()

    def _abort_stops(self, tx_id: str, op_key: str) -> bool:
        return tx_id in self.aborted and op_key in self.step_keys

    def _check_provider(self) -> None:
        sent = self.provider.sent
        while self.sent_seen < len(sent):
            key = sent[self.sent_seen]
            self.sent_seen += 1
            self.monitor.on_call(key, self.provider.calls[key])
        applied = self.provider.applied
        while self.applied_seen < len(applied):
            _, key = applied[self.applied_seen]
            self.applied_seen += 1
            self.monitor.on_apply(key, self.provider.applies[key], self.provider.applies)

    def _pick(self, *, faulty: bool) -> tuple[str, Callable[[], None]]:
        rng = self.rng
        options: list[tuple[str, float, Callable[[], None]]] = []
        for d, at, decide_command, decide_observation in self.partitions:
            if d.commands.pending():
                options.append(("decide_command" + at, 3, decide_command))
            if d.observations.pending():
                options.append(("decide_observation" + at, 3, decide_observation))
            if d.answers:
                options.append(("decide_answer" + at, 3, d.decide_answer))
            if d.ready():
                options.append(("decider_send" + at, 2, d.send))
            for i in d.committable():
                options.append((f"decider_commit{i or ''}{at}", 2, partial(d.commit, i)))
            if any(batch.committed for batch in d.wire):
                options.append(("decider_end" + at, 3, d.end))
            if faulty and d.wire:
                # A failed transaction, or a commit whose answer was lost.
                options.append(("decider_abort" + at, 0.3, d.abort))
            if faulty and self.crash_rate:
                w = self.crash_rate * 10
                lose = partial(self._lose_partition, d)
                options.append(("decider_loses_partition" + at, w, lose))
                options.append(("decider_revoked" + at, w, partial(self._revoke, d)))
        for name, consumer, handler in (
            ("saga", self.saga.events, self.saga.consume),
            ("projector", self.projection.events, self.projection.consume),
        ):
            if consumer.pending():
                options.append((name, 3, handler))
        if self.saga.events.committed < self.saga.events.position:
            options.append(("saga_commit", 1, self.saga.events.commit))
        calls = self.host.calls
        for i in self.host.due():
            name = f"call{i}" if calls[i].owned else f"zombie{i}"
            options.append((name, 3, partial(self.host.resume, i)))
        for i in self.provider.due_deliveries(self.clock.now):
            options.append((f"webhook{i}", 2, partial(self.webhooks.deliver, i)))
        if self.holds.held and self.holds.claimable(self.clock.now):
            options.append(("resume_held", 2, self.host.resume_held))
        if self.reconciler.due():
            options.append(("reconcile", 1, self.reconciler.tick))
        for view in self.projection.views.values() if self.projection.reviewed else ():
            for review_id, leg_key in self.operator.open_reviews(view):
                if review_id not in self.resolved and not self._in_dispatch():
                    if review_id in self.approvals.answers and not self._shown(view.tx_id):
                        continue  # his last answer is not decided and shown yet
                    options.append(("resolve", 1, self._resolver(view, review_id, leg_key)))
        if self.approvals.classes is not None:
            for view in self.projection.views.values():
                for what, weight, op in self.approvals.choices(view):
                    options.append((what, weight, partial(self._approval, view, op)))
        if faulty:
            for tx in self.submits:
                if tx.tx_id not in self.aborted and self.abort_rate:
                    options.append(("abort", self.abort_rate * 10, partial(self._abort, tx)))
                if self.abort_rate:
                    # The intake retrying a submit it was not sure Kafka acknowledged.
                    options.append(("resubmit", self.abort_rate * 5, partial(self._resubmit, tx)))
            if self.switch_rate:
                options.append(("engage", self.switch_rate * 10, self._engage))
                for i in range(len(self.holds.switches)):
                    options.append((f"release{i}", 0.5, partial(self.holds.release, i)))
            if self.policy.governed:
                policy = self.policy
                options.append(("withdraw_grant", 0.2, policy.withdraw))
                options.append(("regrant", 0.2, policy.regrant))
                if policy.task_id is not None:
                    options.append(("revoke_task", 0.1, policy.revoke_task))
                    options.append(("expire_task", 0.1, policy.expire_task))
            if self.stop_rate:
                options.append(("clean_stop", self.stop_rate * 10, self._clean_stop))
            if self.crash_rate:
                w = self.crash_rate * 10
                # Twice the others: the crash that kills calls between their begin and
                # their answer, the window the take-over rule is for.
                options.append(("crash_decider", 2 * w, self._crash_decider))
                options.append(("crash_saga", w, self.saga.events.crash))
        options.append(("tick", 1, self._advance))
        # A weighted draw, by hand: cheaper than random.choices for a few options.
        point = rng.random() * sum(w for _, w, _ in options)
        for name, weight, action in options:
            point -= weight
            if point < 0:
                return name, action
        return options[-1][0], options[-1][2]

    def _engage(self) -> None:
        self.holds.engage(*self.rng.choice(SWITCH_SCOPES))

    def _crash_decider(self) -> None:
        """The decider process dies with every partition's calls and memory."""
        self.host.crash()
        for decider in self.deciders:
            decider.crash()

    def _clean_stop(self) -> None:
        """The decider process stops cleanly (Decider._run's end): every partition revoked
        as at a rebalance, then the host's leave gives its calls LEAVE_WAIT_S before the
        process ends; the partitions' next owner is another process (new holders)."""
        stopping = set(self.host.holder.values())
        for decider in self.deciders:
            decider.revoke(commits=self.rng.random() < 0.5)
        self.host.leave(stopping, int(LEAVE_WAIT_S * 1000))

    def _lose_partition(self, decider: SimDecider) -> None:
        decider.lose_partition(self.rng.randint(0, 20000))

    def _revoke(self, decider: SimDecider) -> None:
        decider.revoke(commits=self.rng.random() < 0.5)

    def _advance(self) -> None:
        timers = [c.wakes() for c in self.host.calls]
        timers += [d.start_at() for d in self.deciders if d.staged is not None]
        timers += [w.due for w in self.provider.outbox]
        timers += self.holds.lapses()
        timers.append(self.reconciler.last_tick + TICK_MS)
        future = [t for t in timers if t > self.clock.now]
        step = self.rng.randint(1, 1500)
        self.clock.now = min([*future, self.clock.now + step]) if future else self.clock.now + step

    def _resubmit(self, tx: SubmitTransaction) -> None:
        self.send_input(tx)

    def _abort(self, tx: SubmitTransaction) -> None:
        self.aborted.add(tx.tx_id)
        self.send_input(abort(tx, self.clock))

    def _resolver(self, view: TxView, review_id: str, key: str) -> Callable[[], None]:
        def resolve() -> None:
            for message in self.approvals.resolving(
                view, self.operator.resolve(view, review_id, key)
            ):
                self.send_input(message)
            if review_id not in self.approvals.answers:
                self.resolved.add(review_id)

        return resolve

    def _approval(self, view: TxView, op: OpView) -> None:
        self.send_input(self.approvals.decide(view, op))

    def _shown(self, tx_id: str) -> bool:
        """Whether what was sent for the transaction was decided, and the projection shows
        it (what the person sees before he looks again)."""
        d = self.decider_of(tx_id)
        return not (d.pending() or d.staged or d.wire or self.projection.events.pending())

    def _in_dispatch(self) -> bool:
        """Whether a call may still reach the provider: a person checking the provider
        now could judge too early (the operator's race, not recon's). With production's
        leases, not while every call only polls a claim (.long_leases)."""
        if self.long_leases is not None and long_leases.judges_while(self.host.calls):
            return False
        return bool(self.host.calls)

    def _quiet(self) -> bool:
        if self.provider.outbox:
            return False
        if any(d.pending() or d.staged or d.wire for d in self.deciders):
            return False
        if self.host.calls or self.holds.held:
            return False
        for consumer in (self.saga.events, self.projection.events):
            if consumer.pending():
                return False
        return self._why() == ""

    def _why(self) -> str:
        reasons = []
        for tx in self.submits:
            state = self.decider_of(tx.tx_id).state_of((TENANT, tx.tx_id))
            why = self.monitor.settled(tx.tx_id, state)
            if why:
                reasons.append(why)
        return "; ".join(reasons)

    def event_bytes(self) -> bytes:
        return b"\n".join(e.model_dump_json().encode() for e in self.events.records)
