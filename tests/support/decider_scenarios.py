"""Generated decider inputs for the property tests of the decider and of the projection.

Mostly plausible inputs (answers for what is in flight, the saga's next command, a
resolution of the open review), mixed with noise: stale, duplicated, out of place, sent
under another operation's key, or reusing a message id for other content. Transactions
mix steps with and without an undo and notifications of both kinds, so aborts,
compensations and reviews of either leg all happen (see `label`).
"""

from collections.abc import Callable
from functools import partial
from typing import TypeVar

from hypothesis import event
from hypothesis import strategies as st

from events.definition import Leg, OpStatus, Resolution, TxStatus
from events.envelope import Envelope
from events.inputs import (
    AbortTransaction,
    CompensateOperation,
    DeciderInput,
    OperationObserved,
    Outcome,
    PlanCompensation,
    RequestReview,
    ResolveReview,
    Source,
    SubmitTransaction,
)
from events.transaction_events import OperationDispatched, ReviewResolved
from support.txbuilders import abort, compensate, observed, plan, request_review, resolve, submit
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state

OUTCOMES = list(Outcome)
SOURCES = [Source.RESPONSE, Source.LOOKUP, Source.WEBHOOK]
# Providers mostly succeed: weighted so that steps get confirmed often enough for a later
# failure to have something to undo.
ANSWERS = [Outcome.SUCCEEDED] * 5 + [o for o in Outcome if o is not Outcome.SUCCEEDED]
T = TypeVar("T")
FOREIGN_KEY = "rk1_" + "0" * 40  # a key no operation of the transaction holds


@st.composite
def scenarios(draw: st.DrawFn) -> list[DeciderInput]:
    # Mostly several steps: a failure after a confirmed step is what needs an undo. The
    # rare branches below test for a value inside the range, not 0, which hypothesis favours.
    steps = [f"s{i}" for i in range(pick(draw, [3, 2, 4, 1]))]
    # About one step in six has no undo: a failure after it must skip it in the plan.
    uncompensated = tuple(s for s in steps if draw(st.integers(0, 5)) == 3)
    notes = tuple(f"n{i}" for i in range(draw(st.integers(0, 2))))
    compensation_notes = tuple(f"u{i}" for i in range(draw(st.integers(0, 1))))
    actions = steps + list(notes) + list(compensation_notes)
    first = submit(steps, notes, on_compensated=compensation_notes, uncompensated=uncompensated)
    keys = [k for op in first.operations for k in (op.op_key, op.compensation_key) if k]
    # Many scenarios have a step after the first that the provider never applies (it
    # answers anything but success): they fail after earlier steps are confirmed.
    doomed = pick(draw, [None, *steps[1:]])
    inputs: list[DeciderInput] = [first]
    state, _ = handle(initial_state("demo", "tx-1"), first)
    for n in range(draw(st.integers(4, 40))):
        if draw(st.integers(0, 29)) == 17:
            message: DeciderInput = abort(n)  # someone changes their mind, at any point
        elif draw(st.integers(0, 3)) == 2:
            message = noise(draw, inputs, steps, actions, keys, n)
        else:
            message = plausible(draw, state, n, doomed) or noise(
                draw, inputs, steps, actions, keys, n
            )
        inputs.append(message)
        state, _ = handle(state, message)
    return inputs


def pick(draw: st.DrawFn, options: list[T]) -> T:
    """One of `options`, shrinking towards the first. Drawing an index instead of building
    st.sampled_from(options) at every step keeps generation cheap (strategy construction
    dominated the run time)."""
    return options[draw(st.integers(0, len(options) - 1))]


def plausible(
    draw: st.DrawFn, state: TransactionState, n: int, doomed: str | None = None
) -> DeciderInput | None:
    """What the system would plausibly send next. Answers, saga commands and resolutions
    are drawn as groups of equal weight, so a scenario that fails reaches its undo and
    its reviews are resolved, instead of drowning them among the many possible answers."""
    # Thunks: only the message drawn is built.
    answers: list[Callable[[], DeciderInput]] = []
    resolutions: list[Callable[[], DeciderInput]] = []
    for op in state.operations:
        action = op.spec.action
        for leg, current in op.legs():
            if current.review:
                resolutions += [
                    partial(resolve, action, current.attempt, r, leg, n) for r in Resolution
                ]
            if current.in_flight:
                attempt = current.attempt
                answers += [
                    partial(observed, action, attempt, outcome, n, source, leg=leg)
                    for outcome in ANSWERS
                    for source in (Source.RESPONSE, Source.LOOKUP)
                    if not (action == doomed and leg is Leg.FORWARD)
                    or outcome is not Outcome.SUCCEEDED
                ]
                if action != doomed or leg is Leg.COMPENSATION:
                    answers.append(
                        partial(observed, action, 0, Outcome.SUCCEEDED, n, Source.WEBHOOK, leg=leg)
                    )
                answers.append(partial(request_review, action, attempt, leg))
    saga: list[Callable[[], DeciderInput]] = [partial(compensate, a) for a in state.plan]
    if state.status is TxStatus.COMPENSATING and not state.plan:
        saga.append(partial(plan, *reversed(confirmed_with_compensation(state))))
    groups = [g for g in (answers, resolutions, saga) if g]
    return pick(draw, pick(draw, groups))() if groups else None


def confirmed_with_compensation(state: TransactionState) -> list[str]:
    return [
        s.spec.action
        for s in state.steps()
        if s.status is OpStatus.CONFIRMED and s.spec.compensation is not None
    ]


def noise(
    draw: st.DrawFn,
    inputs: list[DeciderInput],
    steps: list[str],
    actions: list[str],
    keys: list[str],
    n: int,
) -> DeciderInput:
    legs = list(Leg)
    match draw(st.integers(0, 9)):
        case 0:
            return pick(draw, inputs)  # an exact redelivery
        case 1:
            return same_id_other_content(pick(draw, inputs), n)
        case 2:
            return abort(n)
        case 3:
            return plan(*draw(st.permutations(steps)))
        case 4:
            return compensate(pick(draw, steps))
        case 5:
            return request_review(pick(draw, actions), draw(st.integers(1, 3)), pick(draw, legs))
        case 6:
            resolution = pick(draw, list(Resolution))
            attempt = draw(st.integers(1, 3))
            return resolve(pick(draw, actions), attempt, resolution, pick(draw, legs), n)
        case 7 | 8:
            action = pick(draw, steps if draw(st.booleans()) else actions)
            attempt, outcome = draw(st.integers(0, 4)), pick(draw, OUTCOMES)
            leg = pick(draw, legs) if action in steps else Leg.FORWARD
            return observed(action, attempt, outcome, n, pick(draw, SOURCES), leg=leg)
        case _:
            obs = observed(
                pick(draw, actions),
                draw(st.integers(0, 3)),
                pick(draw, OUTCOMES),
                n,
                pick(draw, SOURCES),
                leg=pick(draw, legs),
            )
            return under_key(obs, pick(draw, [*keys, FOREIGN_KEY]))


def under_key(obs: OperationObserved, key: str) -> OperationObserved:
    """The observation as if it had been filed under `key`: another operation's key (a
    misrouted webhook, a bug at the edge) or none of ours."""
    return obs.model_copy(update={"op_key": key, "message_id": f"{obs.message_id}-{key}"})


def same_id_other_content(message: DeciderInput, n: int) -> DeciderInput:
    """Another message under the same id: a producer bug or a replay of a rewritten
    record. A message id the decider has acted on is never acted on again."""
    match message:
        case OperationObserved():
            outcome = OUTCOMES[(OUTCOMES.index(message.outcome) + 1 + n % 5) % len(OUTCOMES)]
            return message.model_copy(update={"outcome": outcome, "attempt": message.attempt + 1})
        case ResolveReview():
            others = [r for r in Resolution if r is not message.resolution]
            return message.model_copy(update={"resolution": others[n % len(others)]})
        case AbortTransaction():
            return message.model_copy(update={"reason": "another reason", "actor": "operator"})
        case PlanCompensation():
            return message.model_copy(update={"plan": (*reversed(message.plan), "s0")})
        case CompensateOperation():
            return message.model_copy(update={"action": "s1" if message.action == "s0" else "s0"})
        case RequestReview():
            return message.model_copy(update={"attempt": message.attempt + 1})
        case SubmitTransaction():
            return message.model_copy(update={"operations": message.operations[:1]})
    raise AssertionError(f"no variant for {message.type}")


def run(
    inputs: list[DeciderInput], start: TransactionState | None = None
) -> tuple[TransactionState, list[Envelope]]:
    state, log = start or initial_state("demo", "tx-1"), []
    for message in inputs:
        state, envelopes = handle(state, message)
        log += envelopes
    return state, log


def label(state: TransactionState, log: list[Envelope]) -> None:
    """Tell hypothesis' statistics (--hypothesis-show-statistics) which shapes a scenario
    reached, so a generator that stops producing compensations or reviews shows."""
    event(f"final status: {state.status}")
    events = [e.event() for e in log]
    compensation = [
        e for e in events if isinstance(e, OperationDispatched) and e.leg is Leg.COMPENSATION
    ]
    resolved = [e for e in events if isinstance(e, ReviewResolved)]
    event(f"compensation dispatched: {bool(compensation)}")
    event(f"undo confirmed: {any(e.type == 'OperationCompensated' for e in events)}")
    event(f"review opened: {any(e.type == 'OperationNeedsReview' for e in events)}")
    event(f"review resolved: {sorted({e.leg.value for e in resolved}) or 'none'}")
    event(f"abort requested: {any(e.type == 'TransactionAbortRequested' for e in events)}")
    uncompensated = any(op.spec.compensation is None for op in state.steps())
    event(f"a step without undo: {uncompensated}")
