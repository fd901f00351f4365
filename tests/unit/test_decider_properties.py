"""Properties of the decider over arbitrary interleavings of observations."""

from hypothesis import given, settings
from hypothesis import strategies as st
from txbuilders import observed, submit

from events.definition import OperationKind, OpStatus, TxStatus
from events.envelope import Envelope, verify_chain
from events.inputs import DeciderInput, Outcome, Source
from events.transaction_events import OperationDispatched, OperationFailed
from services.decider.transaction import TransactionState, handle, initial_state

OUTCOMES = list(Outcome)


@st.composite
def scenarios(draw: st.DrawFn) -> list[DeciderInput]:
    steps = [f"s{i}" for i in range(draw(st.integers(1, 4)))]
    notes = tuple(f"n{i}" for i in range(draw(st.integers(0, 2))))
    inputs: list[DeciderInput] = [submit(steps, notes)]
    for n in range(draw(st.integers(0, 25))):
        if len(inputs) > 1 and draw(st.integers(0, 3)) == 0:
            inputs.append(draw(st.sampled_from(inputs[1:])))  # an exact redelivery
            continue
        action = draw(st.sampled_from(steps + list(notes)))
        inputs.append(
            observed(
                action,
                draw(st.integers(1, 4)),
                draw(st.sampled_from(OUTCOMES)),
                n,
                draw(st.sampled_from(list(Source))),
            )
        )
    return inputs


def run(inputs: list[DeciderInput]) -> tuple[TransactionState, list[Envelope]]:
    state, log = initial_state("demo", "tx-1"), []
    for message in inputs:
        state, envelopes = handle(state, message)
        log += envelopes
    return state, log


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_decider_is_deterministic(inputs: list[DeciderInput]) -> None:
    assert run(inputs) == run(inputs)


@settings(max_examples=300, deadline=None)
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
            if isinstance(event, OperationDispatched):
                op = current.operation(event.action)
                assert op is not None
                if op.spec.kind is OperationKind.STEP:
                    earlier = current.steps()[: current.steps().index(op)]
                    assert all(s.status is OpStatus.CONFIRMED for s in earlier)
                else:
                    assert current.status is TxStatus.COMMITTED  # no notification before commit
                # re-dispatch only after a lookup proved the effect absent
                if event.attempt > 1:
                    assert op.status is OpStatus.UNKNOWN
                    assert message.type == "OperationObserved"
                    assert message.outcome is Outcome.ABSENT
            current, _ = handle_one(current, envelope)
        assert current == state


def handle_one(state: TransactionState, envelope: Envelope) -> tuple[TransactionState, None]:
    from services.decider.transaction import record

    return record(state, envelope), None


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_seq_is_contiguous_and_the_chain_verifies(inputs: list[DeciderInput]) -> None:
    _, log = run(inputs)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert verify_chain(log) == []


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_replaying_the_log_rebuilds_the_state(inputs: list[DeciderInput]) -> None:
    from services.decider.transaction import record

    state, log = run(inputs)
    rebuilt = initial_state("demo", "tx-1")
    for envelope in log:
        rebuilt = record(rebuilt, envelope)
    assert rebuilt == state
