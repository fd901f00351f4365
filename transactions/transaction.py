"""The transaction state machine: initial_state, decide, evolve.

Pure: no I/O, no clock, no randomness. Time arrives on the input message.

Rules it enforces (docs/design.md promises 1-5):
- steps run in order; a step is dispatched only once every step before it is confirmed;
- an `unknown` step blocks everything after it; only evidence moves it on;
- the transaction commits only when every step is confirmed, and `on_commit`
  notifications are dispatched only after TransactionCommitted (`on_compensated` ones
  only after TransactionCompensated);
- a definitive failure, a review resolved `not_applied` or an abort fails the
  transaction; the confirmed steps before it are then undone in reverse order, one at a
  time, each undo under its own stable key, as the saga orchestrator asks; a step's call
  the dispatcher did not begin because the abort was recorded first
  (events.aborted_before_call) is that abort;
- an observation must carry the attempt of the current dispatch of its leg (the fencing
  token), otherwise it is recorded and ignored. Webhooks (told apart by their source,
  not their attempt number) are sightings not tied to a dispatch: they can prove an
  effect exists and nothing else;
- a duplicated input (same message id) changes nothing.

An operation has two legs, each a value with its own status and attempt: `forward` (the
call itself) and `compensation` (its undo; None until dispatched). A leg in manual review
holds the id of its open review. The operation's status in the API's vocabulary
(`compensating`, `compensated`, ...) is derived from the two legs, never stored. How each
event moves the legs and the transaction's status is in events.legs, whose rules
the projection applies too.
"""

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple, assert_never

from events.aborted_before_call import aborted_before_call
from events.approval_events import OperationRejected
from events.approval_inputs import ApproveOperation, RejectOperation
from events.approval_ledger import evolve_approvals
from events.attempt_gate import ATTEMPT_REFUSED, NewAttempt, attempt_refusals
from events.catalog import SideEffect
from events.compensation import compensation_payload
from events.definition import Leg, OperationKind, OpStatus, Resolution, TxStatus
from events.envelope import Envelope, seal
from events.inputs import (
    AbortTransaction,
    ClaimTransaction,
    CompensateOperation,
    DeciderInput,
    OperationObserved,
    Outcome,
    PlanCompensation,
    ReleaseTransaction,
    RequestReview,
    ResolveReview,
    Source,
    SubmitTransaction,
)
from events.keys import review_id
from events.legs import (
    LEG_EVENTS,
    LegStatus,
    evolve_legs,
    evolve_status,
)
from events.retry_policy import ATTEMPT_BUDGET, looks_up_first, may_resend, resend_without_lookup
from events.transaction_events import (
    CommandIgnored,
    CommandRefused,
    CompensationPlanned,
    Event,
    Evidence,
    EvidenceRecorded,
    ObservationIgnored,
    OperationCompensated,
    OperationConfirmed,
    OperationDispatched,
    OperationFailed,
    OperationNeedsReview,
    OperationUnknown,
    ReviewResolved,
    TransactionAbortRequested,
    TransactionAccepted,
    TransactionCommitted,
    TransactionCompensated,
    TransactionFailed,
    TransactionNeedsReview,
)
from transactions import approvals, ownership
from transactions.evidence import evidence_of, evidence_of_review
from transactions.input_bounds import (
    capped,
    counts_against_sessions,
    remember,
    remember_refusal,
    repeated,
)
from transactions.revisions import pin_for, pinned_payload, rejection_reason
from transactions.side_effects import leg_info
from transactions.state import OperationState, TransactionState

# Why an abort is on the log before its command: the dispatcher found it recorded.
ABORT_SEEN = "abort recorded before the step's call was begun"

# A `write` is re-sent (under the same key) only after a lookup proved it absent, and
# at most this many times in all; past that a person decides. Per class in
# events.retry_policy (a destructive operation is never re-sent by a machine).
MAX_ATTEMPTS = ATTEMPT_BUDGET[SideEffect.WRITE]


def initial_state(tenant: str, tx_id: str) -> TransactionState:
    return TransactionState(tenant=tenant, tx_id=tx_id)


def is_terminal(state: TransactionState) -> bool:
    settled = (TxStatus.COMMITTED, TxStatus.FAILED, TxStatus.COMPENSATED, TxStatus.MANUAL_REVIEW)
    return state.status in settled and not any(
        leg.in_flight for op in state.operations for _, leg in op.legs()
    )


# --- decide -------------------------------------------------------------------------


def decide(state: TransactionState, message: DeciderInput) -> list[Event]:
    return _decision(state, message)[0]


def _decision(
    state: TransactionState, message: DeciderInput
) -> tuple[list[Event], TransactionState]:
    """The events `decide` gives, and `state` with them folded in by `evolve` (the chain's
    bookkeeping aside): `_advance` needs that fold to know what comes next, and `handle`
    keeps it rather than folding every event a second time."""
    if message.message_id in state.seen:
        return [], state
    if state.status is None and not isinstance(message, SubmitTransaction):
        return [], state  # not ours to judge: the runtime dead-letters it
    past_cap = _capped(state, message)
    if past_cap is not None:
        return past_cap, _fold(state, past_cap)
    match message:
        case SubmitTransaction():
            events = _submit(state, message)
        case ClaimTransaction():
            events = ownership.claim(state.owner, state.status, message)
        case ReleaseTransaction():
            events = ownership.release(state.owner, message)
        case OperationObserved():
            events = _observe(state, message)
        case AbortTransaction():
            events = _abort(state, message)
        case PlanCompensation():
            events = _plan(state, message)
        case CompensateOperation():
            events = _compensate(state, message)
        case RequestReview():
            events = _request_review(state, message)
        case ResolveReview():
            events = _resolve(state, message)
        case ApproveOperation():
            events = approvals.approve(state, message)
        case RejectOperation():
            events = approvals.reject(state, message)
            if isinstance(events[0], OperationRejected):
                rejected = state.operation(message.action)
                assert rejected is not None
                events += _fail_if_step(_fold(state, events), rejected, message.reason)
        case _:
            assert_never(message)
    if not events or repeated(state.refused, events):
        return [], state
    # Each part charged from the state before it: charged_to follows the submitter and the
    # owner through the events exactly as evolve does (a dispatch's charge moves no state).
    events = ownership.charged_to(state.agent_id, state.owner, events)
    folded = _fold(state, events)
    then = _advance(folded, _time_of(message))
    if then:
        then = ownership.charged_to(folded.agent_id, folded.owner, then)
        folded = _fold(folded, then)
    return events + then, folded


def _capped(state: TransactionState, message: DeciderInput) -> list[Event] | None:
    """Past the cap on session-caused events, a command from a session other than the
    owner's is not judged (transactions.input_bounds)."""
    match message:
        case AbortTransaction():
            by_agent = message.operator is None
        case SubmitTransaction() | ClaimTransaction() | ReleaseTransaction() | RequestReview():
            by_agent = True
        case _:
            return None
    return capped(
        state.session_events,
        state.owner,
        message.type,
        message.agent_id,
        message.session_id,
        by_agent=by_agent,
    )


def _submit(state: TransactionState, cmd: SubmitTransaction) -> list[Event]:
    if state.status is not None:
        # The first intent under a tx_id is the intent. An identical resubmission is a
        # retry; a different one was refused with 409 at intake, and is here with its rule.
        return ownership.resubmitted(state.fingerprint, cmd)
    return [
        TransactionAccepted(
            agent_id=cmd.agent_id,
            fingerprint=cmd.fingerprint,
            operations=cmd.operations,
            submitted_by=cmd.submitted_by,
            **ownership.accepted_fields(cmd),
        )
    ]


def _observe(state: TransactionState, obs: OperationObserved) -> list[Event]:
    op = state.operation(obs.action)
    leg = op.leg_of(obs.op_key) if op else None
    if op is None or leg is None:
        return []
    evidence = evidence_of(obs)
    current = op.leg(leg)
    action, attempt = op.spec.action, current.attempt if current else 0

    def ignored(reason: str) -> list[Event]:
        return [
            ObservationIgnored(
                action=action,
                leg=leg,
                attempt=obs.attempt,
                current_attempt=attempt,
                reason=reason,
                evidence=evidence,
            )
        ]

    # The source, not the attempt number, says whether this is a webhook: a webhook that
    # carried attempt 1 must not pass for the answer of dispatch 1 (its "absent" would
    # re-send), and an answer that carried attempt 0 must not pass for a webhook.
    webhook = obs.source is Source.WEBHOOK
    if not webhook and obs.attempt != attempt:
        return ignored("stale_attempt")
    if current is None or not current.in_flight:
        return ignored(f"operation_{current.status if current else 'not_dispatched'}")
    if webhook and obs.outcome is not Outcome.SUCCEEDED:
        # A webhook proves that an effect exists; its silence proves nothing.
        return [EvidenceRecorded(action=action, leg=leg, attempt=attempt, evidence=evidence)]
    match obs.outcome:
        case Outcome.SUCCEEDED:
            if leg is Leg.COMPENSATION:
                return [_compensated(state, op, attempt, obs.remote_id, evidence)]
            return [
                OperationConfirmed(
                    action=action, attempt=attempt, remote_id=obs.remote_id, evidence=evidence
                )
            ]
        case Outcome.REJECTED:
            if leg is Leg.COMPENSATION:
                # The undo was refused: the world is now inconsistent; a person decides.
                return _review(state, op, leg, attempt, "compensation_rejected", evidence)
            failed = OperationFailed(action=action, attempt=attempt, evidence=evidence)
            if op.spec.kind is OperationKind.STEP and aborted_before_call(obs):
                # The abort, recorded at the intake, stopped the call before any was begun:
                # it is the abort, even if its command is still on its way (or was never
                # produced); `_advance` then ends it as every abort ends.
                if state.aborting:
                    return [failed]
                return [TransactionAbortRequested(actor="recon", reason=ABORT_SEEN), failed]
            reason = rejection_reason(obs)  # "stale_revision": the agent must re-plan
            return [failed, *_fail_if_step(_fold(state, [failed]), op, reason)]
        case Outcome.UNKNOWN | Outcome.UNAVAILABLE:
            # A lookup that could not reach the provider is the dispatcher's answer only when
            # the dispatcher made it; the reconciler's is evidence, or its next `absent`
            # would re-send while the first call may still land (see the ABSENT case).
            answered = obs.outcome is Outcome.UNKNOWN or obs.by_dispatcher
            if current.status is LegStatus.DISPATCHED and answered:
                unknown = OperationUnknown(
                    action=action, leg=leg, attempt=attempt, evidence=evidence
                )
                info = leg_info(op.spec, leg)
                if resend_without_lookup(info) and may_resend(info, attempt):
                    # A read changed nothing: ask again rather than look for an effect.
                    return [unknown, _dispatch(op, leg, attempt + 1)]
                return [unknown]
            return [EvidenceRecorded(action=action, leg=leg, attempt=attempt, evidence=evidence)]
        case Outcome.ABSENT:
            events: list[Event] = [
                EvidenceRecorded(action=action, leg=leg, attempt=attempt, evidence=evidence)
            ]
            if current.status is LegStatus.DISPATCHED:
                # No dispatcher has answered this attempt yet: its call may not have been
                # made, so a key with no effect proves only that the call has not landed.
                # Sending again would spend an attempt per lookup while a dispatcher lags,
                # and put the operation in review with the first call still to land. The
                # dispatcher answers every dispatch it reads (looking up first if it is a
                # redelivery); if none ever does, the reconciler's budget ends in review.
                return events
            # The dispatcher said `unknown` and the key holds no effect: sending again
            # under the same key is safe for a write, even if the first call is still
            # travelling (the provider dedupes). Never for a destructive operation: it
            # stays unknown until a lookup finds it or a person decides (events.retry_policy).
            info = leg_info(op.spec, leg)
            if may_resend(info, attempt):
                return [*events, _dispatch(op, leg, attempt + 1)]
            if info.side_effect is SideEffect.DESTRUCTIVE:
                return events
            return events + _review(state, op, leg, attempt, "attempt_budget_exhausted", evidence)
        case Outcome.KEY_CONFLICT:
            return _review(state, op, leg, attempt, "idempotency_key_reused", evidence)
        case _:
            assert_never(obs.outcome)


def _abort(state: TransactionState, cmd: AbortTransaction) -> list[Event]:
    fenced = ownership.fence(
        state.owner, cmd.type, cmd.agent_id, cmd.session_id, by_agent=cmd.operator is None
    )
    if fenced is not None:
        return [fenced]
    before_commit = state.status in approvals.OPEN or (
        state.status is TxStatus.MANUAL_REVIEW and not state.plan
    )
    if not before_commit or state.aborting:
        status = "aborting" if state.aborting else state.status
        return [CommandIgnored(command=cmd.type, reason=f"transaction_{status}")]
    return [TransactionAbortRequested(actor=cmd.actor, reason=cmd.reason)]


def _plan(state: TransactionState, cmd: PlanCompensation) -> list[Event]:
    if state.plan == cmd.plan:
        return []  # the saga asked again after a restart: already planned
    expected = tuple(reversed(_compensable(state)))
    if state.status is not TxStatus.COMPENSATING or state.plan or cmd.plan != expected:
        return [CommandIgnored(command=cmd.type, reason="plan_does_not_match")]
    return [CompensationPlanned(plan=cmd.plan)]


def _compensate(state: TransactionState, cmd: CompensateOperation) -> list[Event]:
    op = state.operation(cmd.action)
    if op is not None and op.compensation is not None:
        return []  # already dispatched: the saga asked again after a restart
    if op is None or cmd.action not in state.plan:
        return [CommandIgnored(command=cmd.type, reason="not_in_plan")]
    earlier = state.plan[: state.plan.index(cmd.action)]
    if not state.all_compensated(earlier):
        return [CommandIgnored(command=cmd.type, reason="earlier_compensation_not_done")]
    return [_dispatch(op, Leg.COMPENSATION, 1)]


def _request_review(state: TransactionState, cmd: RequestReview) -> list[Event]:
    # recon's own requests (a reconciler's, the gate's) name no agent; an agent's must
    # name its session.
    fenced = ownership.fence(
        state.owner, cmd.type, cmd.agent_id, cmd.session_id, by_agent=cmd.agent_id is not None
    )
    if fenced is not None:
        return [fenced]
    op = state.operation(cmd.action)
    current = op.leg(cmd.leg) if op else None
    if op is None or current is None or not current.in_flight or current.attempt != cmd.attempt:
        return [CommandIgnored(command=cmd.type, reason="operation_not_in_flight")]
    return _review(state, op, cmd.leg, cmd.attempt, cmd.reason, cmd.evidence)


def _resolve(state: TransactionState, cmd: ResolveReview) -> list[Event]:
    under_review = [
        (op, leg, current)
        for op in state.operations
        for leg, current in op.legs()
        if current.review == cmd.review_id
    ]
    if not under_review:
        return [CommandIgnored(command=cmd.type, reason="review_not_open")]
    [(op, leg, current)] = under_review
    attempt = current.attempt
    resolved = ReviewResolved(
        review_id=cmd.review_id,
        action=op.spec.action,
        leg=leg,
        resolution=cmd.resolution,
        note=cmd.note,
        actor=cmd.actor,
    )
    evidence = evidence_of_review(cmd, attempt)
    if cmd.resolution is Resolution.RETRY:
        # A new attempt: what allowed the first one must still hold (attempt_gate).
        refusals = attempt_refusals(
            NewAttempt(
                state.tenant,
                state.tx_id,
                op.spec,
                leg,
                attempt + 1,
                cmd.issued_at,
                "review_retry",
                approvals.current(state, op.spec.action),
            )
        )
        if refusals:
            return [
                CommandRefused(
                    command=cmd.type,
                    reason=ATTEMPT_REFUSED,
                    rule="; ".join(refusals),
                    agent_id=None,
                    session_id=None,
                )
            ]
    if cmd.resolution is Resolution.RETRY or (
        leg is Leg.COMPENSATION and cmd.resolution is Resolution.NOT_APPLIED
    ):
        # An undo that did not happen must still happen: try it again, like a retry.
        return [resolved, _dispatch(op, leg, attempt + 1)]
    if leg is Leg.COMPENSATION:
        return [resolved, _compensated(state, op, attempt, None, evidence)]
    if cmd.resolution is Resolution.APPLIED:
        return [
            resolved,
            OperationConfirmed(
                action=op.spec.action, attempt=attempt, remote_id=None, evidence=evidence
            ),
        ]
    failed = OperationFailed(action=op.spec.action, attempt=attempt, evidence=evidence)
    return [
        resolved,
        failed,
        *_fail_if_step(_fold(state, [resolved, failed]), op, "resolved_not_applied"),
    ]


def _review(
    state: TransactionState,
    op: OperationState,
    leg: Leg,
    attempt: int,
    reason: str,
    evidence: Evidence | None,
) -> list[Event]:
    rid = review_id(state.tenant, state.tx_id, op.spec.action, leg.value, attempt)
    events: list[Event] = [
        OperationNeedsReview(
            action=op.spec.action,
            leg=leg,
            attempt=attempt,
            reason=reason,
            review_id=rid,
            evidence=evidence,
        )
    ]
    # A notification in review does not hold the transaction; a step or an undo does.
    if op.spec.kind is OperationKind.STEP:
        events.append(TransactionNeedsReview(action=op.spec.action, reason=reason))
    return events


def _compensated(
    state: TransactionState,
    op: OperationState,
    attempt: int,
    remote_id: str | None,
    evidence: Evidence,
) -> OperationCompensated:
    remaining = state.plan[state.plan.index(op.spec.action) + 1 :]
    return OperationCompensated(
        action=op.spec.action,
        attempt=attempt,
        remote_id=remote_id,
        evidence=evidence,
        remaining=remaining,
    )


def _fail_if_step(state: TransactionState, op: OperationState, reason: str) -> list[Event]:
    if op.spec.kind is not OperationKind.STEP:
        return []  # a failed notification leaves the transaction as it is
    return [
        TransactionFailed(action=op.spec.action, reason=reason, compensable=_compensable(state))
    ]


def _compensable(state: TransactionState) -> tuple[str, ...]:
    return tuple(
        s.spec.action
        for s in state.steps()
        if s.status is OpStatus.CONFIRMED and s.spec.compensation is not None
    )


def _advance(state: TransactionState, now: datetime) -> list[Event]:
    """What the transaction does next on its own: dispatch the next step, commit and
    release the notifications, fail an aborted one once nothing is in flight, or close
    a finished compensation."""
    match state.status:
        case TxStatus.ACCEPTED | TxStatus.RUNNING | TxStatus.AWAITING_APPROVAL:
            steps = state.steps()
            if state.aborting:
                if any(s.forward.in_flight for s in steps):
                    return []  # in-flight steps settle first
                return _aborted(state)
            for step in steps:
                if step.status is OpStatus.CONFIRMED:
                    continue
                if step.status in (OpStatus.PENDING, OpStatus.AWAITING_APPROVAL):
                    held = approvals.gate(state, step, now)
                    if held is not None:
                        return held  # it waits for a person's approval, bound to it
                    # Bound to the state the approval was given at, too.
                    approval = approvals.current(state, step.spec.action)
                    pin = pin_for(step.spec.payload, approval)
                    return [_dispatch(step, Leg.FORWARD, 1, pin=pin)]
                return []  # in flight or unknown: everything after it waits
            return [TransactionCommitted(), *_notify(state, OperationKind.ON_COMMIT)]
        case TxStatus.COMPENSATING:
            if state.plan and state.all_compensated(state.plan):
                return [TransactionCompensated(), *_notify(state, OperationKind.ON_COMPENSATED)]
            return []
        case (
            TxStatus.COMMITTED
            | TxStatus.COMPENSATED
            | TxStatus.FAILED
            | TxStatus.MANUAL_REVIEW
            | None
        ):
            return []
        case _:
            assert_never(state.status)


def _aborted(state: TransactionState) -> list[Event]:
    """An abort once nothing is in flight. It fails the transaction only when that is
    true: a confirmed step that has no undo is an effect that stands, and a `failed`
    transaction with nothing to undo would tell the agent it never happened (issue 18,
    item 17). If every step was confirmed, the abort came too late: the transaction
    commits and the trail says why. If some did not run, no status is true without a
    person: the transaction goes to review, naming the step whose effect stands."""
    stands = [
        s for s in state.steps() if s.status is OpStatus.CONFIRMED and s.spec.compensation is None
    ]
    if not stands:
        return [TransactionFailed(action="", reason="aborted", compensable=_compensable(state))]
    too_late = CommandIgnored(command="AbortTransaction", reason="abort_too_late_effect_stands")
    if all(s.status is OpStatus.CONFIRMED for s in state.steps()):
        return [too_late, TransactionCommitted(), *_notify(state, OperationKind.ON_COMMIT)]
    return [
        too_late,
        TransactionNeedsReview(action=stands[-1].spec.action, reason="aborted_after_irreversible"),
    ]


def _notify(state: TransactionState, kind: OperationKind) -> list[Event]:
    return [
        _dispatch(op, Leg.FORWARD, 1) for op in state.of_kind(kind) if op.status is OpStatus.PENDING
    ]


def _dispatch(
    op: OperationState, leg: Leg, attempt: int, *, pin: int | None = None
) -> OperationDispatched:
    """`pin`: the revision to bind a first attempt to; a later one sends its first's.
    Whether it looks up first is the attempt's and the operation's (events.retry_policy.
    looks_up_first), so transactions.unanswered rebuilds it by this same rule."""
    spec = op.spec
    lookup_first = looks_up_first(leg_info(spec, leg), attempt)
    if leg is Leg.FORWARD:
        pinned = op.pinned_revision if attempt > 1 else pin
        return OperationDispatched(
            action=spec.action,
            leg=leg,
            op_key=spec.op_key,
            attempt=attempt,
            lookup_first=lookup_first,
            provider=spec.provider,
            operation=spec.operation,
            payload=pinned_payload(spec.payload, pinned),
            pinned_revision=pinned,
            facts=spec.facts,
        )
    assert spec.compensation is not None and spec.compensation_key is not None
    return OperationDispatched(
        action=spec.action,
        leg=leg,
        op_key=spec.compensation_key,
        attempt=attempt,
        lookup_first=lookup_first,
        provider=spec.provider,
        operation=spec.compensation.operation,
        payload=_compensation_payload(op),
        facts=spec.compensation.facts,
    )


def _compensation_payload(op: OperationState) -> dict[str, Any]:
    """What the compensation sends: derived from the step and its evidence
    (events.compensation), never a payload the agent wrote for it; the intake refuses one,
    and one recorded before it did is ignored here rather than sent ungoverned."""
    assert op.spec.compensation is not None
    return compensation_payload(
        op.spec.payload, op.spec.op_key, op.remote_id, op.spec.compensation.template
    )


# --- evolve -------------------------------------------------------------------------


def evolve(state: TransactionState, event: Event) -> TransactionState:
    """The transaction's status and its operations' legs move by the rules in
    events.legs, which the projection applies too; the rest is the decider's. One copy of
    the state per event, whatever the event changes (the decider folds every event)."""
    changes: dict[str, Any] = {"status": evolve_status(state.status, event)}
    owner = ownership.evolve_owner(state.owner, event)
    if owner is not state.owner:
        changes["owner"] = owner
    action: str | None = None
    op_changes: dict[str, object] = {}
    match event:
        case TransactionAccepted():
            changes["agent_id"] = event.agent_id
            changes["fingerprint"] = event.fingerprint
            changes["operations"] = tuple(OperationState(spec=s) for s in event.operations)
            changes["submitted_by"] = event.submitted_by
        case OperationConfirmed():
            action, op_changes["remote_id"] = event.action, event.remote_id
        case OperationDispatched(leg=Leg.FORWARD, attempt=1):
            action, op_changes["pinned_revision"] = event.action, event.pinned_revision
        case CompensationPlanned():
            changes["plan"] = event.plan
        case TransactionAbortRequested():
            changes["aborting"] = True
        case _:
            pass
    approvals = evolve_approvals(state.approvals, event)
    if approvals is not state.approvals:
        changes["approvals"] = approvals
    operations: tuple[OperationState, ...] = changes.get("operations", state.operations)
    if isinstance(event, LEG_EVENTS):
        action = event.action
        op = next((o for o in operations if o.spec.action == action), None)
        assert op is not None, action
        forward, compensation = evolve_legs(op.forward, op.compensation, event)
        op_changes.update(forward=forward, compensation=compensation)
    if op_changes:
        changes["operations"] = tuple(
            op.model_copy(update=op_changes) if op.spec.action == action else op
            for op in operations
        )
    return state.model_copy(update=changes)


def _fold(state: TransactionState, events: list[Event]) -> TransactionState:
    for event in events:
        state = evolve(state, event)
    return state


# --- the log ------------------------------------------------------------------------


def record(state: TransactionState, envelope: Envelope) -> TransactionState:
    """Apply one sealed event: business state plus chain bookkeeping. Restoring a
    decider from the events is a fold of `record`; `handle`'s state is that fold."""
    event = envelope.event()
    return _recorded(evolve(state, event), [event], envelope)


def _recorded(folded: TransactionState, events: list[Event], last: Envelope) -> TransactionState:
    """`folded` (the state with `events` evolved in) with what recording them adds: the
    chain's head, the input that caused them, the input bounds' counts. All the events of
    one `handle` share their cause, which the window remembers once either way."""
    return folded.model_copy(
        update={
            "seq": last.seq,
            "last_hash": last.hash,
            "seen": remember(folded.seen, last.causation_id),
            **_bounded(folded, events),
        }
    )


def _bounded(state: TransactionState, events: Iterable[Event]) -> dict[str, Any]:
    """What the input bounds keep of recorded events (transactions.input_bounds)."""
    session_events, refused = state.session_events, state.refused
    for event in events:
        session_events += counts_against_sessions(event)
        refused = remember_refusal(refused, event)
    return {"session_events": session_events, "refused": refused}


def replay(tenant: str, tx_id: str, events: Iterable[Event]) -> TransactionState:
    """The state a fold of `record` gives for these events, but for the chain's
    bookkeeping and the input ids, which the events alone do not carry: the transaction as
    its projected log shows it, for a process that asks `decide` what the decider will
    say (the intake, before it answers)."""
    recorded = list(events)
    state = _fold(initial_state(tenant, tx_id), recorded)
    return state.model_copy(update=_bounded(state, recorded))


class Handled(NamedTuple):
    """One input decided, sealed and recorded: the state after it, the envelopes to write,
    and the decided events they carry, in order. Each event equals its envelope's
    `event()`, which reads it back out of the envelope's JSON data (2.1 us a dispatch):
    the runtime orders each dispatch's call from the event it decided instead."""

    state: TransactionState
    envelopes: list[Envelope]
    events: list[Event]


def handled(state: TransactionState, message: DeciderInput) -> Handled:
    """decide, seal and record in one step: what the runtime does per input. The state is
    the fold of `record` over the envelopes (the property tests hold it so), computed from
    the decision's own fold and events instead of reading each event back."""
    events, folded = _decision(state, message)
    if not events:
        return Handled(state, [], [])
    envelopes = seal(
        tenant=state.tenant,
        tx_id=state.tx_id,
        last_seq=state.seq,
        last_hash=state.last_hash,
        events=events,
        causation_id=message.message_id,
        occurred_at=_time_of(message),
    )
    return Handled(_recorded(folded, events, envelopes[-1]), envelopes, events)


def handle(
    state: TransactionState, message: DeciderInput
) -> tuple[TransactionState, list[Envelope]]:
    """`handled` without the events: the state after the input and its envelopes."""
    after, envelopes, _ = handled(state, message)
    return after, envelopes


def _time_of(message: DeciderInput) -> datetime:
    if isinstance(message, OperationObserved):
        return message.observed_at
    return message.issued_at
