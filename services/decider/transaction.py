"""The transaction state machine: initial_state, decide, evolve.

Pure: no I/O, no clock, no randomness. Time arrives on the input message.

Rules it enforces (DESIGN.md promises 1-4):
- steps run in order; a step is dispatched only once every step before it is confirmed;
- an `unknown` step blocks everything after it; only evidence moves it on;
- the transaction commits only when every step is confirmed, and `on_commit`
  notifications are dispatched only after TransactionCommitted;
- an observation must carry the attempt of the current dispatch (the fencing token),
  otherwise it is recorded and ignored;
- a duplicated observation (same message id) changes nothing.
"""

from datetime import datetime
from typing import assert_never

from events.definition import OperationKind, OperationSpec, OpStatus, TxStatus
from events.envelope import GENESIS_HASH, Envelope, seal
from events.inputs import DeciderInput, OperationObserved, Outcome, SubmitTransaction
from events.model import Message
from events.transaction_events import (
    Event,
    Evidence,
    EvidenceRecorded,
    ObservationIgnored,
    OperationConfirmed,
    OperationDispatched,
    OperationFailed,
    OperationNeedsReview,
    OperationUnknown,
    TransactionAccepted,
    TransactionCommitted,
    TransactionFailed,
    TransactionNeedsReview,
)
from services.decider.evidence import evidence_of

# A `write` is re-sent (under the same key) only after a lookup proved it absent, and
# at most this many times in all; past that a person decides.
MAX_ATTEMPTS = 3

IN_FLIGHT = (OpStatus.DISPATCHED, OpStatus.UNKNOWN)


class OperationState(Message):
    spec: OperationSpec
    status: OpStatus = OpStatus.PENDING
    attempt: int = 0
    remote_id: str | None = None


class TransactionState(Message):
    tenant: str
    tx_id: str
    status: TxStatus | None = None  # None: nothing accepted under this tx_id yet
    agent_id: str = ""
    fingerprint: str = ""
    operations: tuple[OperationState, ...] = ()
    # Chain bookkeeping, advanced by `record` from the envelopes.
    seq: int = 0
    last_hash: str = GENESIS_HASH
    seen: frozenset[str] = frozenset()

    def operation(self, action: str) -> OperationState | None:
        return next((op for op in self.operations if op.spec.action == action), None)

    def steps(self) -> list[OperationState]:
        return [op for op in self.operations if op.spec.kind is OperationKind.STEP]


def initial_state(tenant: str, tx_id: str) -> TransactionState:
    return TransactionState(tenant=tenant, tx_id=tx_id)


def is_terminal(state: TransactionState) -> bool:
    return state.status in (TxStatus.COMMITTED, TxStatus.FAILED, TxStatus.MANUAL_REVIEW) and all(
        op.status not in IN_FLIGHT for op in state.operations
    )


# --- decide -------------------------------------------------------------------------


def decide(state: TransactionState, message: DeciderInput) -> list[Event]:
    match message:
        case SubmitTransaction():
            return _submit(state, message)
        case OperationObserved():
            return _observe(state, message)
        case _:
            assert_never(message)


def _submit(state: TransactionState, cmd: SubmitTransaction) -> list[Event]:
    if state.status is not None:
        # The first intent under a tx_id is the intent. An identical resubmission is a
        # retry; a different one was already refused with 409 at intake.
        return []
    accepted = TransactionAccepted(
        agent_id=cmd.agent_id, fingerprint=cmd.fingerprint, operations=cmd.operations
    )
    return [accepted, *_advance(evolve(state, accepted))]


def _observe(state: TransactionState, obs: OperationObserved) -> list[Event]:
    op = state.operation(obs.action)
    if state.status is None or op is None or op.spec.op_key != obs.op_key:
        return []  # not ours to judge: the runtime dead-letters it
    if obs.message_id in state.seen:
        return []
    evidence = evidence_of(obs)
    if obs.attempt != op.attempt:
        return [
            ObservationIgnored(
                action=op.spec.action,
                attempt=obs.attempt,
                current_attempt=op.attempt,
                reason="stale_attempt",
                evidence=evidence,
            )
        ]
    if op.status not in IN_FLIGHT:
        return [
            ObservationIgnored(
                action=op.spec.action,
                attempt=obs.attempt,
                current_attempt=op.attempt,
                reason=f"operation_already_{op.status.value}",
                evidence=evidence,
            )
        ]
    action, attempt = op.spec.action, op.attempt
    is_step = op.spec.kind is OperationKind.STEP
    events: list[Event]
    match obs.outcome:
        case Outcome.SUCCEEDED:
            events = [
                OperationConfirmed(
                    action=action, attempt=attempt, remote_id=obs.remote_id, evidence=evidence
                )
            ]
        case Outcome.REJECTED:
            events = [OperationFailed(action=action, attempt=attempt, evidence=evidence)]
            if is_step:
                # Compensation of the confirmed steps before it is the saga's seam.
                events.append(TransactionFailed(action=action, reason="step_rejected"))
        case Outcome.UNKNOWN | Outcome.UNAVAILABLE:
            if op.status is OpStatus.DISPATCHED:
                events = [OperationUnknown(action=action, attempt=attempt, evidence=evidence)]
            else:
                events = [EvidenceRecorded(action=action, attempt=attempt, evidence=evidence)]
        case Outcome.ABSENT:
            # Proof that the key holds no effect: sending again under the same key is
            # safe. While the call is still in flight its own answer is awaited instead.
            events = [EvidenceRecorded(action=action, attempt=attempt, evidence=evidence)]
            if op.status is OpStatus.DISPATCHED:
                pass
            elif attempt < MAX_ATTEMPTS:
                events.append(_dispatch(op, attempt=attempt + 1, lookup_first=True))
            else:
                events += _review(op, attempt, "attempt_budget_exhausted", evidence, is_step)
        case Outcome.KEY_CONFLICT:
            events = _review(op, attempt, "idempotency_key_reused", evidence, is_step)
        case _:
            assert_never(obs.outcome)
    after = state
    for event in events:
        after = evolve(after, event)
    return events + _advance(after)


def _review(
    op: OperationState, attempt: int, reason: str, evidence: Evidence, is_step: bool
) -> list[Event]:
    events: list[Event] = [
        OperationNeedsReview(
            action=op.spec.action, attempt=attempt, reason=reason, evidence=evidence
        )
    ]
    if is_step:
        events.append(TransactionNeedsReview(action=op.spec.action, reason=reason))
    return events


def _advance(state: TransactionState) -> list[Event]:
    """What the transaction does next on its own: dispatch the next step, or commit
    and release the notifications."""
    if state.status not in (TxStatus.ACCEPTED, TxStatus.RUNNING):
        return []
    for step in state.steps():
        if step.status is OpStatus.CONFIRMED:
            continue
        if step.status is OpStatus.PENDING:
            return [_dispatch(step, attempt=1, lookup_first=False)]
        return []  # in flight or unknown: everything after it waits
    notifications: list[Event] = [
        _dispatch(op, attempt=1, lookup_first=False)
        for op in state.operations
        if op.spec.kind is OperationKind.ON_COMMIT and op.status is OpStatus.PENDING
    ]
    return [TransactionCommitted(), *notifications]


def _dispatch(op: OperationState, *, attempt: int, lookup_first: bool) -> OperationDispatched:
    spec = op.spec
    return OperationDispatched(
        action=spec.action,
        op_key=spec.op_key,
        attempt=attempt,
        lookup_first=lookup_first,
        provider=spec.provider,
        operation=spec.operation,
        payload=spec.payload,
    )


# --- evolve -------------------------------------------------------------------------


def evolve(state: TransactionState, event: Event) -> TransactionState:
    match event:
        case TransactionAccepted():
            return state.model_copy(
                update={
                    "status": TxStatus.ACCEPTED,
                    "agent_id": event.agent_id,
                    "fingerprint": event.fingerprint,
                    "operations": tuple(OperationState(spec=s) for s in event.operations),
                }
            )
        case OperationDispatched():
            state = _set_op(state, event.action, status=OpStatus.DISPATCHED, attempt=event.attempt)
            if state.status is TxStatus.ACCEPTED:
                state = state.model_copy(update={"status": TxStatus.RUNNING})
            return state
        case OperationUnknown():
            return _set_op(state, event.action, status=OpStatus.UNKNOWN)
        case OperationConfirmed():
            return _set_op(
                state, event.action, status=OpStatus.CONFIRMED, remote_id=event.remote_id
            )
        case OperationFailed():
            return _set_op(state, event.action, status=OpStatus.FAILED)
        case OperationNeedsReview():
            return _set_op(state, event.action, status=OpStatus.MANUAL_REVIEW)
        case EvidenceRecorded() | ObservationIgnored():
            return state
        case TransactionCommitted():
            return state.model_copy(update={"status": TxStatus.COMMITTED})
        case TransactionFailed():
            return state.model_copy(update={"status": TxStatus.FAILED})
        case TransactionNeedsReview():
            return state.model_copy(update={"status": TxStatus.MANUAL_REVIEW})
        case _:
            assert_never(event)


def _set_op(state: TransactionState, action: str, **changes: object) -> TransactionState:
    ops = tuple(
        op.model_copy(update=changes) if op.spec.action == action else op for op in state.operations
    )
    return state.model_copy(update={"operations": ops})


# --- the log ------------------------------------------------------------------------


def record(state: TransactionState, envelope: Envelope) -> TransactionState:
    """Apply one sealed event: business state plus chain bookkeeping. Restoring a
    decider from the events is a fold of `record`."""
    state = evolve(state, envelope.event())
    return state.model_copy(
        update={
            "seq": envelope.seq,
            "last_hash": envelope.hash,
            "seen": state.seen | {envelope.causation_id},
        }
    )


def handle(
    state: TransactionState, message: DeciderInput
) -> tuple[TransactionState, list[Envelope]]:
    """decide, seal and record in one step: what the runtime does per input."""
    events = decide(state, message)
    if not events:
        return state, []
    envelopes = seal(
        tenant=state.tenant,
        tx_id=state.tx_id,
        last_seq=state.seq,
        last_hash=state.last_hash,
        events=events,
        causation_id=message.message_id,
        occurred_at=_time_of(message),
    )
    for envelope in envelopes:
        state = record(state, envelope)
    return state, envelopes


def _time_of(message: DeciderInput) -> datetime:
    match message:
        case SubmitTransaction():
            return message.issued_at
        case OperationObserved():
            return message.observed_at
        case _:
            assert_never(message)
