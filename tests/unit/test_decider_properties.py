"""Properties of the decider over arbitrary interleavings of observations and commands:
answers from providers, webhooks, aborts, saga commands and review resolutions, in any
order, duplicated, stale, misaddressed or reusing a message id (tests/support/decider_scenarios.py).

Example counts come from the hypothesis profile (tests/conftest.py): `ci` by default,
`deep` under `make properties`."""

from hypothesis import example, given
from hypothesis import strategies as st
from support.decider_scenarios import label, run, same_id_other_content, scenarios
from support.txbuilders import observed, submit

from events.definition import Leg, OperationKind, OpStatus, TxStatus
from events.envelope import verify_chain
from events.inputs import DeciderInput, OperationObserved, Outcome, Source
from events.legs import LegStatus
from events.transaction_events import (
    OperationCompensated,
    OperationConfirmed,
    OperationDispatched,
    OperationFailed,
    TransactionCommitted,
    TransactionFailed,
)
from transactions.state import TransactionState
from transactions.transaction import handle, handled, initial_state, record


@given(scenarios())
def test_decider_is_deterministic(inputs: list[DeciderInput]) -> None:
    assert run(inputs) == run(inputs)


@given(scenarios())
def test_a_duplicated_input_changes_nothing(inputs: list[DeciderInput]) -> None:
    state = initial_state("demo", "tx-1")
    for n, message in enumerate(inputs):
        state, _ = handle(state, message)
        again, envelopes = handle(state, message)
        assert envelopes == [] and again == state
        if message.message_id in state.seen:
            # A message id acted on is never acted on again, whatever content it carries.
            again, envelopes = handle(state, same_id_other_content(message, n))
            assert envelopes == [] and again == state


@given(scenarios())
# Found on random seeds: a webhook that carried attempt 1 and said "absent" re-sent the step.
@example(
    [
        submit(["s0", "s1"]),
        observed("s0", 1, Outcome.SUCCEEDED, 0),
        observed("s1", 1, Outcome.ABSENT, 1, Source.WEBHOOK),
    ]
)
def test_invariants_hold_at_every_event(inputs: list[DeciderInput]) -> None:
    state, log = initial_state("demo", "tx-1"), []
    for message in inputs:
        before = state
        state, envelopes = handle(state, message)
        log += envelopes
        if envelopes and isinstance(message, OperationObserved):
            # an observation counts only for the operation whose key it carries
            spec = before.operation(message.action).spec  # type: ignore[union-attr]
            assert message.op_key in (spec.op_key, spec.compensation_key)
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
            if isinstance(event, TransactionFailed):
                # the plan to come undoes only confirmed steps that have an undo
                undoable = [current.operation(a) for a in event.compensable]
                assert all(o and o.status is OpStatus.CONFIRMED for o in undoable)
                assert all(o and o.spec.compensation for o in undoable)
            if isinstance(event, TransactionCommitted):
                assert all(s.status is OpStatus.CONFIRMED for s in current.steps())
                # an aborted transaction commits only when the abort came too late: an
                # effect with no undo stands (issue 18, item 17)
                assert not current.aborting or any(
                    s.spec.compensation is None for s in current.steps()
                )
            if isinstance(event, OperationDispatched):
                check_dispatch(current, event, message)
            current = record(current, envelope)
        assert current == state
    label(state, log)


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
            current.operation(a).compensation.status is LegStatus.CONFIRMED  # type: ignore[union-attr]
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


@given(scenarios())
def test_the_decided_events_are_those_their_envelopes_carry(inputs: list[DeciderInput]) -> None:
    # The runtime orders each dispatch's call from the decided event (transactions.
    # transaction.handled), not from the event read back out of the envelope it wrote.
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, envelopes, events = handled(state, message)
        assert events == [envelope.event() for envelope in envelopes]


@given(scenarios())
def test_seq_is_contiguous_and_the_chain_verifies(inputs: list[DeciderInput]) -> None:
    _, log = run(inputs)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert verify_chain(log) == []


@given(scenarios())
def test_replaying_the_log_rebuilds_the_state(inputs: list[DeciderInput]) -> None:
    state, log = run(inputs)
    rebuilt = initial_state("demo", "tx-1")
    for envelope in log:
        rebuilt = record(rebuilt, envelope)
    assert rebuilt == state


@given(scenarios(), st.data())
def test_a_restore_from_the_snapshot_mid_stream_changes_nothing(
    inputs: list[DeciderInput], data: st.DataObject
) -> None:
    # The runtime writes the state to the changelog as JSON and a restarted decider reads
    # it back (services/decider/restore.py): carrying on from it must be carrying on.
    cut = data.draw(st.integers(0, len(inputs)), label="restore after input")
    state, log = run(inputs)
    before, first = run(inputs[:cut])
    restored = TransactionState.model_validate_json(before.model_dump_json().encode())
    assert restored == before
    after, rest = run(inputs[cut:], start=restored)
    assert first + rest == log
    assert after == state
