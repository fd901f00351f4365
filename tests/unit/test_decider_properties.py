"""Properties of the decider over arbitrary interleavings of observations and commands:
answers from providers, webhooks, aborts, saga commands and review resolutions, in any
order, duplicated or stale."""

from hypothesis import given, settings
from hypothesis import strategies as st
from support.txbuilders import abort, compensate, observed, plan, request_review, resolve, submit

from events.definition import Leg, OperationKind, OpStatus, Resolution, TxStatus
from events.envelope import Envelope, verify_chain
from events.inputs import DeciderInput, OperationObserved, Outcome, Source
from events.transaction_events import (
    OperationCompensated,
    OperationConfirmed,
    OperationDispatched,
    OperationFailed,
    TransactionCommitted,
)
from services.decider.transaction import TransactionState, handle, initial_state, record

OUTCOMES = list(Outcome)
SOURCES = [Source.RESPONSE, Source.LOOKUP, Source.WEBHOOK]


@st.composite
def scenarios(draw: st.DrawFn) -> list[DeciderInput]:
    """Mostly plausible inputs (answers for what is in flight, the saga's next command, a
    resolution of the open review), mixed with noise: stale, duplicated, out of place."""
    steps = [f"s{i}" for i in range(draw(st.integers(1, 4)))]
    notes = tuple(f"n{i}" for i in range(draw(st.integers(0, 2))))
    undo_notes = tuple(f"u{i}" for i in range(draw(st.integers(0, 1))))
    actions = steps + list(notes) + list(undo_notes)
    inputs: list[DeciderInput] = [submit(steps, notes, on_compensated=undo_notes)]
    state, _ = handle(initial_state("demo", "tx-1"), inputs[0])
    for n in range(draw(st.integers(0, 40))):
        if draw(st.integers(0, 3)) == 0:
            message = draw(noise(inputs, steps, actions, n))
        else:
            message = draw(plausible(state, steps, n)) or draw(noise(inputs, steps, actions, n))
        inputs.append(message)
        state, _ = handle(state, message)
    return inputs


def plausible(
    state: TransactionState, steps: list[str], n: int
) -> st.SearchStrategy[DeciderInput | None]:
    options: list[DeciderInput] = []
    for op in state.operations:
        for leg in Leg:
            if op.in_flight(leg):
                options += [
                    observed(op.spec.action, op.attempt_of(leg), outcome, n, source, leg=leg)
                    for outcome in Outcome
                    for source in (Source.RESPONSE, Source.LOOKUP)
                ]
                options.append(request_review(op.spec.action, op.attempt_of(leg), leg))
        if op.open_review and op.review_leg:
            options += [
                resolve(op.spec.action, op.attempt_of(op.review_leg), r, op.review_leg, n)
                for r in Resolution
            ]
    if state.status is TxStatus.COMPENSATING and not state.plan:
        forward = [s for s in steps if state.operation(s).status is OpStatus.CONFIRMED]  # type: ignore[union-attr]
        options.append(plan(*reversed(forward)))
    for action in state.plan:
        options.append(compensate(action))
    options.append(abort(n))
    return st.sampled_from(options) if options else st.none()


def noise(
    inputs: list[DeciderInput], steps: list[str], actions: list[str], n: int
) -> st.SearchStrategy[DeciderInput]:
    source = st.sampled_from(SOURCES)
    return st.one_of(
        st.sampled_from(inputs),  # an exact redelivery
        st.just(abort(n)),
        st.permutations(steps).map(lambda p: plan(*p)),
        st.sampled_from(steps).map(compensate),
        st.builds(
            request_review, st.sampled_from(actions), st.integers(1, 3), st.sampled_from(list(Leg))
        ),
        st.builds(
            resolve,
            st.sampled_from(actions),
            st.integers(1, 3),
            st.sampled_from(list(Resolution)),
            st.sampled_from(list(Leg)),
            st.just(n),
        ),
        st.builds(
            observed,
            st.sampled_from(steps),
            st.integers(0, 4),
            st.sampled_from(OUTCOMES),
            st.just(n),
            source,
            leg=st.sampled_from(list(Leg)),
        ),
        st.builds(
            observed,
            st.sampled_from(actions),
            st.integers(0, 4),
            st.sampled_from(OUTCOMES),
            st.just(n),
            source,
        ),
    )


def run(inputs: list[DeciderInput]) -> tuple[TransactionState, list[Envelope]]:
    state, log = initial_state("demo", "tx-1"), []
    for message in inputs:
        state, envelopes = handle(state, message)
        log += envelopes
    return state, log


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_decider_is_deterministic(inputs: list[DeciderInput]) -> None:
    assert run(inputs) == run(inputs)


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_a_duplicated_input_changes_nothing(inputs: list[DeciderInput]) -> None:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, _ = handle(state, message)
        again, envelopes = handle(state, message)
        assert envelopes == [] and again == state


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_invariants_hold_at_every_event(inputs: list[DeciderInput]) -> None:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        before = state
        state, envelopes = handle(state, message)
        current = before
        for envelope in envelopes:
            event = envelope.event()
            if isinstance(event, OperationFailed):
                # unknown never becomes failed without a definitive rejection as evidence
                assert event.evidence.outcome is Outcome.REJECTED
            if isinstance(event, OperationConfirmed | OperationCompensated):
                # ... and nothing is confirmed without evidence that the effect exists
                assert event.evidence is not None
                assert event.evidence.outcome is Outcome.SUCCEEDED
            if isinstance(event, TransactionCommitted):
                assert all(s.status is OpStatus.CONFIRMED for s in current.steps())
                assert not current.aborting
            if isinstance(event, OperationDispatched):
                check_dispatch(current, event, message)
            current = record(current, envelope)
        assert current == state


def check_dispatch(
    current: TransactionState, event: OperationDispatched, message: DeciderInput
) -> None:
    op = current.operation(event.action)
    assert op is not None
    if event.leg is Leg.COMPENSATION:
        # undo only confirmed steps, in the planned (reverse) order, one at a time
        assert current.status is TxStatus.COMPENSATING
        assert op.status in (OpStatus.CONFIRMED, OpStatus.COMPENSATING, OpStatus.MANUAL_REVIEW)
        forward = [s.spec.action for s in current.steps()]
        assert list(current.plan) == sorted(current.plan, key=forward.index, reverse=True)
        earlier = current.plan[: current.plan.index(event.action)]
        assert all(
            current.operation(a).comp_status is OpStatus.CONFIRMED  # type: ignore[union-attr]
            for a in earlier
        )
        return
    if op.spec.kind is OperationKind.STEP:
        steps = current.steps()
        assert all(s.status is OpStatus.CONFIRMED for s in steps[: steps.index(op)])
        assert current.status in (TxStatus.ACCEPTED, TxStatus.RUNNING)
        assert not current.aborting or event.attempt > 1
    elif op.spec.kind is OperationKind.ON_COMMIT:
        assert current.status is TxStatus.COMMITTED  # no notification before commit
    else:
        assert current.status is TxStatus.COMPENSATED
    if event.attempt > 1:
        # sent again only after a lookup proved the effect absent, or a person said so
        if isinstance(message, OperationObserved):
            assert message.outcome is Outcome.ABSENT and message.source is not Source.WEBHOOK
        else:
            assert message.type == "ResolveReview"


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_seq_is_contiguous_and_the_chain_verifies(inputs: list[DeciderInput]) -> None:
    _, log = run(inputs)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert verify_chain(log) == []


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_replaying_the_log_rebuilds_the_state(inputs: list[DeciderInput]) -> None:
    state, log = run(inputs)
    rebuilt = initial_state("demo", "tx-1")
    for envelope in log:
        rebuilt = record(rebuilt, envelope)
    assert rebuilt == state
