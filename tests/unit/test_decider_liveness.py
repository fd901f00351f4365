"""Liveness: driven by a simulated world that eventually answers, the decider settles.

The world is the rest of recon around the pure decider: providers that apply or refuse
each leg (their answers may time out), a dispatcher that looks up first when told to, a
pull reconciler that looks up what is unknown and asks for a review when its budget is
spent, webhooks, the real saga reactor, and an operator who resolves reviews (retrying at
most once). Messages are delivered in any order. Once nothing is left to deliver:
- every provider applies everything => the transaction is committed;
- a definitive failure or an abort => compensated (or failed with nothing to undo), or
  waiting in review for a person who has not acted yet; never stuck in between.
"""

from dataclasses import dataclass, field

from hypothesis import event, given
from hypothesis import strategies as st
from support.txbuilders import abort, observed, request_review, resolve, submit

from events.definition import Leg, OperationKind, OpStatus, Resolution, TxStatus
from events.envelope import Envelope
from events.inputs import DeciderInput, Outcome, Source
from events.transaction_events import OperationDispatched, OperationUnknown
from services.saga.reactor import react
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state, is_terminal

LOOKUP_BUDGET = 3  # lookups per (leg, attempt) before the reconciler asks for a review
MAX_DELIVERIES = 3000  # far above what a settling transaction needs: beyond it, a livelock


@dataclass
class Lookup:
    """A scheduled lookup by the pull reconciler."""

    action: str
    leg: Leg
    attempt: int


@dataclass
class World:
    data: st.DataObject
    refuses: set[tuple[str, Leg]]  # legs the provider will never apply
    operator: bool  # whether a person resolves reviews during the run
    effects: set[tuple[str, Leg]] = field(default_factory=set)
    queue: list[DeciderInput | Lookup] = field(default_factory=list)
    lookups: dict[tuple[str, Leg, int], int] = field(default_factory=dict)
    retried: set[tuple[str, Leg]] = field(default_factory=set)
    answered: set[str] = field(default_factory=set)  # reviews the operator has answered
    n: int = 0

    def draw_bool(self, label: str) -> bool:
        return self.data.draw(st.booleans(), label=label)

    def tick(self) -> int:
        self.n += 1  # unique observation ids: a new sighting is never taken for a duplicate
        return self.n

    def react(self, state: TransactionState, envelopes: list[Envelope]) -> None:
        for envelope in envelopes:
            self.queue += react(envelope)  # the real saga orchestrator
            event = envelope.event()
            if isinstance(event, OperationDispatched):
                self.dispatch(event)
            elif isinstance(event, OperationUnknown):
                self.queue.append(Lookup(event.action, event.leg, event.attempt))
        if self.operator:
            self.resolve_reviews(state)

    def dispatch(self, d: OperationDispatched) -> None:
        leg = (d.action, d.leg)
        if d.lookup_first and leg in self.effects:
            self.answer(d, Outcome.SUCCEEDED, Source.LOOKUP)
            return
        if leg not in self.refuses:
            self.effects.add(leg)
            if self.draw_bool("webhook"):
                self.queue.append(
                    observed(d.action, 0, Outcome.SUCCEEDED, self.tick(), Source.WEBHOOK, leg=d.leg)
                )
        if self.draw_bool("response times out"):
            self.answer(d, Outcome.UNKNOWN, Source.RESPONSE)
        else:
            outcome = Outcome.REJECTED if leg in self.refuses else Outcome.SUCCEEDED
            self.answer(d, outcome, Source.RESPONSE)

    def answer(self, d: OperationDispatched, outcome: Outcome, source: Source) -> None:
        self.queue.append(observed(d.action, d.attempt, outcome, self.tick(), source, leg=d.leg))

    def look_up(self, state: TransactionState, task: Lookup) -> None:
        op = state.operation(task.action)
        assert op is not None
        leg = op.leg(task.leg)
        if leg is None or not leg.in_flight or leg.attempt != task.attempt:
            return  # settled or re-sent meanwhile: nothing left to look up
        spent = self.lookups.get((task.action, task.leg, task.attempt), 0) + 1
        self.lookups[(task.action, task.leg, task.attempt)] = spent
        if spent > LOOKUP_BUDGET:
            self.queue.append(request_review(task.action, task.attempt, task.leg))
            return
        if self.draw_bool("lookup unavailable"):
            outcome = Outcome.UNAVAILABLE
            self.queue.append(task)  # it stays unknown: the reconciler comes back
        elif (task.action, task.leg) in self.effects:
            outcome = Outcome.SUCCEEDED
        else:
            outcome = Outcome.ABSENT
        n = self.tick()
        self.queue.append(
            observed(task.action, task.attempt, outcome, n, Source.LOOKUP, leg=task.leg)
        )

    def resolve_reviews(self, state: TransactionState) -> None:
        legs = [(op, leg, current) for op in state.operations for leg, current in op.legs()]
        for op, leg, current in legs:
            if not current.review or current.review in self.answered:
                continue
            self.answered.add(current.review)
            action = op.spec.action
            if (action, leg) not in self.retried and self.draw_bool("operator retries"):
                self.retried.add((action, leg))
                resolution = Resolution.RETRY
            elif leg is Leg.COMPENSATION or (action, leg) in self.effects:
                # An undo the provider refuses is done by hand, then marked applied.
                resolution = Resolution.APPLIED
            else:
                resolution = Resolution.NOT_APPLIED
            self.queue.append(resolve(action, current.attempt, resolution, leg, self.tick()))


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[str], tuple[str, ...], tuple[str, ...]]:
    steps = [f"s{i}" for i in range(draw(st.integers(1, 4)))]
    uncompensated = tuple(s for s in steps if draw(st.integers(0, 3)) == 2)
    notes = tuple(f"n{i}" for i in range(draw(st.integers(0, 2))))
    return steps, uncompensated, notes


def settle(world: World, first: DeciderInput, abort_at: int | None) -> TransactionState:
    state = initial_state("demo", "tx-1")
    world.queue.append(first)
    for delivered in range(MAX_DELIVERIES):
        if delivered == abort_at:
            world.queue.append(abort(world.tick()))
        if not world.queue:
            return state
        # Any message may overtake the others: Kafka orders only per partition, and
        # lookups, webhooks and people act on their own time.
        item = world.queue.pop(world.data.draw(st.integers(0, len(world.queue) - 1)))
        if isinstance(item, Lookup):
            world.look_up(state, item)
            continue
        state, envelopes = handle(state, item)
        world.react(state, envelopes)
    raise AssertionError(f"still busy after {MAX_DELIVERIES} deliveries: a livelock")


@given(worlds(), st.data())
def test_a_transaction_always_settles(
    shape: tuple[list[str], tuple[str, ...], tuple[str, ...]], data: st.DataObject
) -> None:
    steps, uncompensated, notes = shape
    refused = data.draw(st.sampled_from([None, *steps]), label="step the provider refuses")
    compensation_refused = data.draw(
        st.sets(st.sampled_from(steps)), label="undos the provider refuses"
    )
    refuses = {(a, Leg.COMPENSATION) for a in compensation_refused}
    if refused:
        refuses.add((refused, Leg.FORWARD))
    operator = data.draw(st.booleans(), label="operator resolves reviews")
    abort_at = data.draw(st.none() | st.integers(0, 30), label="abort after deliveries")
    world = World(data, refuses, operator)
    first = submit(steps, notes, on_compensated=("u0",), uncompensated=uncompensated)

    state = settle(world, first, abort_at)

    open_reviews = [op for op in state.operations if op.open_review]
    # Never stuck: settled with nothing in flight, or waiting for a person.
    assert is_terminal(state) or (open_reviews and not operator), state
    if operator:
        assert not open_reviews and is_terminal(state)
    waiting = state.status is TxStatus.MANUAL_REVIEW and not operator
    step_states = {s.spec.action: s.status for s in state.steps()}
    if refused is None and abort_at is None:
        # Every provider applies everything: the transaction commits.
        assert state.status is TxStatus.COMMITTED or waiting, state.status
    elif state.status is not TxStatus.COMMITTED:  # an abort after commit is ignored
        assert refused is not None or abort_at is not None
        assert state.status in (TxStatus.COMPENSATED, TxStatus.FAILED) or waiting, state.status
        left = [s.spec.action for s in state.steps() if s.status is OpStatus.CONFIRMED]
        if state.status is not TxStatus.MANUAL_REVIEW:
            # Compensated or failed: no confirmed step that has an undo is left standing.
            assert all(a in uncompensated for a in left), step_states
    if state.status is TxStatus.COMMITTED:
        assert set(step_states.values()) == {OpStatus.CONFIRMED}
        if operator:
            assert all(
                op.status in (OpStatus.CONFIRMED, OpStatus.FAILED)
                for op in state.of_kind(OperationKind.ON_COMMIT)
            )
    if state.status is TxStatus.COMPENSATED and operator:
        assert all(
            op.status in (OpStatus.CONFIRMED, OpStatus.FAILED)
            for op in state.of_kind(OperationKind.ON_COMPENSATED)
        )
    event(f"final status: {state.status}")
    event(f"provider refuses a step: {refused is not None}; abort: {abort_at is not None}")
    event(f"operator present: {operator}")
