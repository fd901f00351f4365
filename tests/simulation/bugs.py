"""Deliberate bugs, injected only inside a simulation run (monkeypatching a pure function
for the duration of a `with`), to prove the simulator catches them. Production code is
never changed.
"""

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from events.definition import Leg, OpStatus, TxStatus
from events.envelope import Envelope
from events.inputs import DeciderInput, OperationObserved, Outcome, PlanCompensation
from events.legs import LegState, LegStatus
from events.observation import Seen
from events.transaction_events import Event, OperationDispatched
from services.decider import take_over
from services.decider.take_over import not_held, take_over_orders
from services.dispatcher import call_plan, gatekeeper
from services.dispatcher.call_plan import Begun
from services.dispatcher.calls_begun import Claimed
from services.governance import gate
from services.governance.gate import Claim, Reservation
from services.providers.classify import classify_response
from services.saga import reactor
from transactions import approvals, transaction
from transactions.finished import FinishedTransaction, revive
from transactions.state import OperationState, TransactionState
from transactions.unanswered import unanswered, waits_on

from . import decider, dispatch_host, policies
from .calls_begun import Row, SimCallsBegun
from .decider import Batch, SimDecider

_advance = transaction._advance
_observe = transaction._observe
_plan = reactor._plan
_unanswered = unanswered
_decide = SimDecider._decide
_commit = SimDecider.commit
_retake = SimDecider._retake
_begin = SimCallsBegun.begin
_waits_on = waits_on
_reserve = gate.reserve
_task_refusal = gate.task_refusal
_quotas = dispatch_host.SimDispatchHost._quotas
_revive = revive


def _dispatch_on_unknown(state: TransactionState, now: datetime) -> list[Event]:
    """Treats an `unknown` step as done and dispatches the next one."""
    if state.status in (TxStatus.ACCEPTED, TxStatus.RUNNING) and not state.aborting:
        for step in state.steps():
            if step.status in (OpStatus.CONFIRMED, OpStatus.UNKNOWN):
                continue
            if step.status is OpStatus.PENDING:
                return [transaction._dispatch(step, Leg.FORWARD, 1)]
            return []
    return _advance(state, now)


def _no_attempt_check(state: TransactionState, obs: OperationObserved) -> list[Event]:
    """Takes every observation as one of the current attempt (forgets the fencing)."""
    op: OperationState | None = state.operation(obs.action)
    leg = op.leg_of(obs.op_key) if op else None
    current = op.leg(leg) if op is not None and leg is not None else None
    if current is not None and obs.attempt:
        obs = obs.model_copy(update={"attempt": current.attempt})
    return _observe(state, obs)


def _unknown_as_rejected(status: int, body: object) -> Seen:
    """Reads a 5xx as a refusal: the classic 'an error means it did not happen'."""
    seen = classify_response(status, body)
    if status >= 500:
        return Seen(Outcome.REJECTED, status, None, body)
    return seen


def _plan_in_step_order(envelope: Envelope, plan: tuple[str, ...]) -> PlanCompensation:
    """Asks to undo the steps in the order they ran (the decider refuses the plan)."""
    return _plan(envelope, tuple(reversed(plan)))


def _destructive_resent(_info: object) -> bool:
    """Sends a redelivered call found absent again, destructive or not: "absent" taken as
    proof that the first call never happened, when it may still land."""
    return True


def _every_leg_unanswered(state: TransactionState) -> list[OperationDispatched]:
    """Takes every leg of a restored state as waiting for its answer, whatever its status:
    a take-over calls again legs already answered, and steps never dispatched."""

    def waiting(leg: LegState) -> LegState:
        return leg.model_copy(
            update={"status": LegStatus.DISPATCHED, "attempt": max(leg.attempt, 1)}
        )

    operations = tuple(
        op.model_copy(
            update={
                "forward": waiting(op.forward),
                "compensation": waiting(op.compensation) if op.compensation else None,
            }
        )
        for op in state.operations
    )
    return _unanswered(state.model_copy(update={"operations": operations}))


def _answered_legs_unanswered(state: TransactionState) -> list[OperationDispatched]:
    """Takes every leg a restored state ever dispatched as waiting for its answer, whatever
    its status: a take-over calls again a step that failed, the transaction failing with it
    (one a person answered `not_applied` after the gate sent it to review was never begun,
    so its call now is a first one)."""
    operations = tuple(
        op.model_copy(
            update={
                "forward": op.forward.model_copy(update={"status": LegStatus.DISPATCHED})
                if op.forward.attempt
                else op.forward
            }
        )
        for op in state.operations
    )
    return _unanswered(state.model_copy(update={"operations": operations}))


def _calls_before_commit(decider: SimDecider, batch: Batch, message: DeciderInput) -> None:
    """Starts a dispatch's call as soon as it is decided, before the transaction that
    holds it commits: an abort or a crash then leaves a call of a dispatch no log holds."""
    staged = len(batch.orders)
    _decide(decider, batch, message)
    decider.host.submit(batch.orders[staged:])


def _offsets_ahead_of_records(decider: SimDecider, index: int = 0) -> None:
    """Commits, with the transaction on the wire, the offsets of every input read so far:
    those staged for the next transaction too, without their records."""
    _commit(decider, index)
    decider.commands.commit()
    decider.observations.commit()


def _staged_survives_failure(decider: SimDecider) -> None:
    """Keeps what was staged on a failed transaction's states through the restore."""
    staged = decider.staged
    _retake(decider)
    decider.staged = staged


def _next_before_wire_ended(decider: SimDecider) -> bool:
    """Starts the staged transaction while the one before it is still on the wire."""
    return decider.staged is not None and decider.clock.now >= decider.start_at()


def _claim_never_waits(
    begun: SimCallsBegun, row: Row, holder: int, now: int, until: int, partition: int
) -> Claimed:
    """Claims a call whoever holds it (the lease's condition left out of the statement): a
    take-over looks up, and sends again, while the old owner's call is on the wire."""
    begun.leases[row] = (holder, until)
    return Claimed.TAKEN if row in begun.rows else Claimed.NO_ROW


def _let_go_on_the_wire(host: dispatch_host.SimDispatchHost, partition: int) -> None:
    """A revocation releases the partition's leases whether or not their call is on the
    wire: the next owner's take-over looks up, and sends again, while it still is."""
    holder = host.holder.get(partition)
    for row, (p, h, _) in list(host.leased.items()):
        if p == partition and h == holder:
            host.begun.release(row, h)
            del host.leased[row]


def _begin_ignores_switches(
    begun: SimCallsBegun,
    tx_id: str,
    op_key: str,
    leg: Leg,
    attempt: int,
    holder: int,
    until: int,
    _switches: tuple[str, ...],
    partition: int,
) -> Begun:
    """The begin statement writes the row without checking the engaged switches (the
    gate's view alone stands): a switch engaged after the gate let a call through is not
    seen."""
    return _begin(begun, tx_id, op_key, leg, attempt, holder, until, (), partition)


def _revive_forgets_the_gate(marker: FinishedTransaction) -> TransactionState:
    """The marker's steps revived ungated, as before it kept `approval_required`: a late
    approval is refused `approval_not_required`."""
    operations = tuple(
        op.model_copy(update={"approval_required": False}) for op in marker.operations
    )
    return _revive(marker.model_copy(update={"operations": operations}))


def _resume_after_finish(
    state: TransactionState | FinishedTransaction | None, dispatch: Any
) -> bool:
    """A finished transaction's hold is resumed as if its state were unknown (the owner's
    `_current` before it handed the marker on): a person failed it, and the call is made."""
    return isinstance(state, FinishedTransaction) or _waits_on(state, dispatch)


def _resume_beside_own_call(host: dispatch_host.SimDispatchHost, running: Any) -> Any:
    """A released hold is resumed at once, even while this process makes a call of the same
    attempt (a take-over's): the two calls' claims share a holder, so neither waits."""
    running.waiting = False
    state = host.current(
        running.order.partition, running.order.envelope.tenant, running.order.envelope.tx_id
    )
    if not _waits_on(state, running.order.dispatch):
        return
    yield from host._carry(running)


def _held_not_again(
    host: dispatch_host.SimDispatchHost, states: Iterable[TransactionState], partition: int
) -> None:
    """The take-over leaves every held leg to the resume, a hold being resumed here too: its
    call is not made again once it ends, though its answer may have gone with the failed
    transaction and the resume forgets its hold."""
    orders = not_held(take_over_orders(states, partition), host.holds.held_on(partition))
    running = host._running()
    host.again.update((o.leg_key, o) for o in orders if o.leg_key in running)
    host.submit(o for o in orders if o.leg_key not in running)


def _claimed_not_asked_again() -> Any:
    """A claim that waited goes on to look up, and sends a leg found absent, without asking
    whether the transaction still waits on it (call_plan._still_awaited answers yes unasked,
    at both its questions): a person failed it while the claim waited out a dead holder's
    lease, and the call is made."""
    yield from ()
    return True


def _carry_gives_up(host: dispatch_host.SimDispatchHost, running: dispatch_host.Running) -> Any:
    """A call whose request failed (Postgres away) is not made again, though its partition
    is still this process's: its leg waits for a caller nobody is."""
    try:
        yield from host._call(running)
    except dispatch_host.Unavailable:
        if running.held is not None:
            host.holds.release_claim(running.held, running.holder)
            running.held = None


def _task_not_rejudged(*_args: Any, **_kwargs: Any) -> None:
    """The dispatcher takes the task as the door judged it: a task revoked or expired
    after the submission stops nothing."""
    return None


def _cap_not_judged(*args: Any, **kwargs: Any) -> Any:
    """The dispatcher judges the task without the call's amount (dispatch_verdict's default,
    0): a cap set on the task after the submission stops no charge."""
    return _task_refusal(*args, **{**kwargs, "amount": 0})


def _undo_not_counted(
    host: dispatch_host.SimDispatchHost, policy: Any, agent_id: str, dispatch: Any
) -> Any:
    """The gate counts forward legs only: a quota on refunds stops no compensation."""
    if dispatch.leg is not Leg.FORWARD:
        return ()
    return _quotas(host, policy, agent_id, dispatch)


def _counted_again(
    *,
    already_counted: bool,
    breaker: Any,
    quotas: Any,
    claims: list[Claim],
    amount: int,
    now: float,
) -> Reservation:
    """A reservation forgets the key's claim: a redelivered dispatch, a lookup-first
    re-send or a review's retry is counted again."""
    return _reserve(
        already_counted=False,
        breaker=breaker,
        quotas=quotas,
        claims=claims,
        amount=amount,
        now=now,
    )


def _quota_not_counted(*_args: Any) -> None:
    """The window's claims are read but never add up to a refusal."""
    return None


def _approval_not_awaited(*_args: Any) -> None:
    """A step that needs approval is dispatched as if it did not (approvals.gate lets every
    pending step go): the person's approval is never waited for."""
    return None


def _retry_without_approval(*_args: Any, **_kwargs: Any) -> list[str]:
    """A review `retry` makes its new attempt whatever allowed the first one (the attempt
    gate asks nothing): a gated step is called again on an approval its first attempt
    spent."""
    return []


def _view_refreshed_late(policy: policies.SimPolicy) -> Any:
    """The gate's view is refreshed only once twice MAX_STALENESS_S old (Gatekeeper._fresh
    with its bound mistaken): a call is judged by a document the operator replaced more
    than MAX_STALENESS_S before."""
    if policy.lags is None:
        return policy.document
    return policy._saved_at(policy.clock.now - policy.lags.randint(0, 2 * policies.STALENESS_MS))[1]


def _review_id_without_attempt(op_key: str, attempt: int, reason: str) -> str:
    """The gate's review of a retried attempt has its first attempt's id, so the decider
    takes it for a duplicate (seen) and the leg waits for a call nobody makes."""
    return f"governance:{op_key}:{reason}"


Patch = tuple[object, str, Callable[..., object]]
BUGS: dict[str, Patch] = {
    "dispatch_on_unknown": (transaction, "_advance", _dispatch_on_unknown),
    "no_attempt_check": (transaction, "_observe", _no_attempt_check),
    "unknown_as_rejected": (dispatch_host, "classify_response", _unknown_as_rejected),
    "plan_in_step_order": (reactor, "_plan", _plan_in_step_order),
    # In the dispatcher's own rules (services.dispatcher.call_plan), which the simulator
    # runs since it interprets the real plan.
    "destructive_resent": (call_plan, "redelivery_may_apply", _destructive_resent),
    # In the decider's take-over rule (services.decider.take_over), which the simulator
    # runs when its decider takes the partition again.
    "take_over_calls_every_leg": (take_over, "unanswered", _every_leg_unanswered),
    "take_over_calls_answered": (take_over, "unanswered", _answered_legs_unanswered),
    # In the simulator's model of when the decider starts a call (after its commit).
    "calls_before_commit": (SimDecider, "_decide", _calls_before_commit),
    # In the simulator's model of the decider's group commit and pipelining (runtime's
    # Staged, _detach, _send and retake).
    "offsets_ahead_of_records": (SimDecider, "commit", _offsets_ahead_of_records),
    "staged_survives_failure": (SimDecider, "_retake", _staged_survives_failure),
    "next_before_wire_ended": (SimDecider, "ready", _next_before_wire_ended),
    # In the simulator's model of the `calls_begun` lease (services.dispatcher.call_lease).
    "claim_never_waits": (SimCallsBegun, "claim", _claim_never_waits),
    # In the model of the revocation's release (services.dispatcher.held_leases).
    "let_go_on_the_wire": (dispatch_host.SimDispatchHost, "let_go", _let_go_on_the_wire),
    # In the simulator's model of the begin statement's switch check (calls_begun.begin_many).
    "begin_ignores_switches": (SimCallsBegun, "begin", _begin_ignores_switches),
    # In the real resume rule (unanswered.waits_on), as it was before a finished
    # transaction's marker reached it.
    "resume_after_finish": (dispatch_host, "waits_on", _resume_after_finish),
    # In the model of DispatchHost._resume_one's wait for this process's own call.
    # In the model of DispatchHost.take_over's `again` for a hold being resumed.
    "held_not_again": (dispatch_host.SimDispatchHost, "take_over", _held_not_again),
    "resume_beside_own_call": (dispatch_host.SimDispatchHost, "_resumed", _resume_beside_own_call),
    # In the real plan (call_plan._still_awaited), as it was before Awaited.
    "claimed_not_asked_again": (call_plan, "_still_awaited", _claimed_not_asked_again),
    # In the model of DispatchHost._carry's error path.
    "carry_gives_up": (dispatch_host.SimDispatchHost, "_carry", _carry_gives_up),
    # In the real gate (services.governance.gate), which the simulated gate and quota
    # reservation call.
    "task_not_rejudged": (gate, "task_refusal", _task_not_rejudged),
    "task_cap_not_judged": (gate, "task_refusal", _cap_not_judged),
    "quota_not_counted": (gate, "quota_refusal", _quota_not_counted),
    "quota_counted_again": (policies, "reserve", _counted_again),
    # In the model of the gate's view of the document (Gatekeeper._fresh, refresh).
    "view_refreshed_late": (policies.SimPolicy, "view", _view_refreshed_late),
    # In the model of Gatekeeper._clear's quotas (undo legs count too).
    "undo_not_counted": (dispatch_host.SimDispatchHost, "_quotas", _undo_not_counted),
    # In the decider's approval rules (transactions.approvals, events.attempt_gate).
    "approval_not_awaited": (approvals, "gate", _approval_not_awaited),
    "retry_without_approval": (transaction, "attempt_refusals", _retry_without_approval),
    # In the real revive (transactions.finished), as the simulated decider calls it.
    "revive_forgets_the_gate": (decider, "revive", _revive_forgets_the_gate),
    # In the gate review's id (gatekeeper.review_request's, events.keys.gate_review_id).
    "review_id_without_attempt": (gatekeeper, "gate_review_id", _review_id_without_attempt),
}

# The first default seed that catches each bug (`uv run python -m tests.simulation --bug
# NAME`), where its test looks first (run.caught): one schedule instead of every seed up to
# it. A change of the model that moves a seed costs that test a scan, not its check; the
# seed it then prints is the one to write here.
CAUGHT_AT: dict[str, int] = {
    "approval_not_awaited": 11,
    "begin_ignores_switches": 48,
    "calls_before_commit": 1,
    "carry_gives_up": 57,
    "claim_never_waits": 86,
    "claimed_not_asked_again": 1410,
    "destructive_resent": 392,
    "dispatch_on_unknown": 2,
    "held_not_again": 810,
    "let_go_on_the_wire": 610,
    "next_before_wire_ended": 2,
    "no_attempt_check": 2,
    "offsets_ahead_of_records": 54,
    "plan_in_step_order": 7,
    "quota_counted_again": 96,
    "quota_not_counted": 24,
    "resume_after_finish": 80,
    "resume_beside_own_call": 634,
    "retry_without_approval": 404,
    "review_id_without_attempt": 2,
    "revive_forgets_the_gate": 1,
    "staged_survives_failure": 2,
    "take_over_calls_answered": 114,
    "take_over_calls_every_leg": 0,
    "task_cap_not_judged": 1748,
    "task_not_rejudged": 0,
    "undo_not_counted": 1748,
    "unknown_as_rejected": 75,
    "view_refreshed_late": 34,
}


@contextmanager
def inject(name: str) -> Iterator[None]:
    """The bug `name` in place for the `with`, then exactly what was there put back: read
    from the target's own namespace, not with getattr, which would unwrap a staticmethod or
    classmethod (restored as a plain function, it becomes an instance method) and would
    read an inherited attribute, which the restore would then shadow on the subclass."""
    target, attribute, variant = BUGS[name]
    restore = patch(target, attribute, variant)
    try:
        yield
    finally:
        restore()


def patch(target: object, attribute: str, variant: object) -> Callable[[], None]:
    """Puts `variant` at `target.attribute`; the function returned puts back what was
    there: the same object from the target's own namespace, or nothing (deleted) when the
    attribute was inherited or absent."""
    namespace = vars(target)
    missing = object()
    original = namespace.get(attribute, missing)
    setattr(target, attribute, variant)

    def restore() -> None:
        if original is missing:
            delattr(target, attribute)
        else:
            setattr(target, attribute, original)

    return restore
