"""given(event) / then(commands) for the saga orchestrator's reactor, and the reactor
driving the real decider through a whole compensation."""

from datetime import datetime

from support.txbuilders import abort, log_of, observed, submit

from events.definition import Leg, TxStatus
from events.envelope import Envelope
from events.inputs import (
    Command,
    CompensateOperation,
    DeciderInput,
    Outcome,
    PlanCompensation,
)
from events.keys import compensation_key
from events.transaction_events import OperationDispatched
from services.saga.reactor import react
from transactions.state import TransactionState
from transactions.transaction import decide, handle, initial_state

FAILED_THIRD_STEP: list[DeciderInput] = [
    submit(["reserve", "charge", "ship"], ("receipt",), on_compensated=("sorry",)),
    observed("reserve", 1, Outcome.SUCCEEDED),
    observed("charge", 1, Outcome.SUCCEEDED, 1),
    observed("ship", 1, Outcome.REJECTED, 2),
]


def the(event_type: str, log: list[Envelope]) -> Envelope:
    return next(e for e in log if e.type == event_type)


def at(envelope: Envelope) -> datetime:
    return datetime.fromisoformat(envelope.occurred_at)


def run_with_saga(
    inputs: list[DeciderInput],
) -> tuple[TransactionState, list[Envelope], list[Command]]:
    """The decider fed `inputs`, with the reactor's commands fed back and every undo
    answered `succeeded` by a stand-in dispatcher, until nothing is left to do."""
    state, log = initial_state("demo", "tx-1"), []
    issued: list[Command] = []
    queue = list(inputs)
    while queue:
        state, envelopes = handle(state, queue.pop(0))
        log += envelopes
        for envelope in envelopes:
            commands = react(envelope)
            issued += commands
            queue += commands
            event = envelope.event()
            if isinstance(event, OperationDispatched) and event.leg is Leg.COMPENSATION:
                queue.append(
                    observed(event.action, event.attempt, Outcome.SUCCEEDED, 10, leg=event.leg)
                )
    return state, log, issued


def test_a_failure_with_confirmed_steps_plans_their_undo_in_reverse_order() -> None:
    failed = the("TransactionFailed", log_of(*FAILED_THIRD_STEP))
    assert failed.data["compensable"] == ["reserve", "charge"]
    assert react(failed) == [
        PlanCompensation(
            message_id="saga:plan:demo:tx-1",
            tenant="demo",
            tx_id="tx-1",
            plan=("charge", "reserve"),
            issued_at=at(failed),
        )
    ]


def test_a_failure_with_nothing_to_undo_calls_for_nothing() -> None:
    failed = the(
        "TransactionFailed", log_of(submit(["reserve"]), observed("reserve", 1, Outcome.REJECTED))
    )
    assert failed.data["compensable"] == []
    assert react(failed) == []


def test_the_plan_calls_for_its_first_undo_and_each_undo_for_the_next() -> None:
    _, log, _ = run_with_saga(FAILED_THIRD_STEP)
    planned = the("CompensationPlanned", log)
    assert react(planned) == [_compensate("charge", planned)]
    first, second = [e for e in log if e.type == "OperationCompensated"]
    assert (first.data["action"], first.data["remaining"]) == ("charge", ["reserve"])
    assert react(first) == [_compensate("reserve", first)]
    assert second.data["remaining"] == []
    assert react(second) == []


def test_the_saga_drives_the_decider_to_compensated_undoing_in_reverse_order() -> None:
    state, log, _ = run_with_saga(FAILED_THIRD_STEP)
    assert state.status is TxStatus.COMPENSATED
    undos = [
        e.event()
        for e in log
        if e.type == "OperationDispatched" and e.data["leg"] == "compensation"
    ]
    assert [(u.action, u.op_key) for u in undos if isinstance(u, OperationDispatched)] == [
        ("charge", compensation_key(state.operation("charge").spec.op_key)),  # type: ignore[union-attr]
        ("reserve", compensation_key(state.operation("reserve").spec.op_key)),  # type: ignore[union-attr]
    ]
    types = [e.type for e in log]
    assert "CommandIgnored" not in types
    # The on_compensated notification only after TransactionCompensated; no on_commit one.
    notified = [
        e.data["action"]
        for e in log
        if e.type == "OperationDispatched" and e.data["leg"] == "forward"
    ]
    assert notified == ["reserve", "charge", "ship", "sorry"]
    sorry = next(i for i, e in enumerate(log) if e.data.get("action") == "sorry")
    assert types.index("TransactionCompensated") < sorry


def test_every_command_issued_again_changes_nothing() -> None:
    # At least once: a restarted orchestrator re-reads events whose commands it already
    # sent. The decider must recognise each of them.
    state, _, issued = run_with_saga(FAILED_THIRD_STEP)
    assert len(issued) == 3  # the plan and two undos
    for command in issued:
        assert decide(state, command) == []


def test_an_abort_with_a_step_in_flight_compensates_once_it_settles() -> None:
    state, log, _ = run_with_saga(
        [
            submit(["reserve", "charge"]),
            observed("reserve", 1, Outcome.SUCCEEDED),
            abort(),
            observed("charge", 1, Outcome.SUCCEEDED, 1),
        ]
    )
    assert the("TransactionFailed", log).data["reason"] == "aborted"
    assert the("CompensationPlanned", log).data["plan"] == ["charge", "reserve"]
    assert state.status is TxStatus.COMPENSATED


def test_every_other_event_calls_for_nothing() -> None:
    committed = log_of(submit(["reserve"], ("receipt",)), observed("reserve", 1, Outcome.SUCCEEDED))
    assert {e.type for e in committed} >= {"TransactionCommitted", "OperationDispatched"}
    for envelope in committed:
        assert react(envelope) == []


def _compensate(action: str, cause: Envelope) -> CompensateOperation:
    return CompensateOperation(
        message_id=f"saga:compensate:demo:tx-1:{action}",
        tenant="demo",
        tx_id="tx-1",
        action=action,
        issued_at=at(cause),
    )
