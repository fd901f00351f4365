"""What the `transactions` and `operations` tables hold, as a fold over one transaction's
events.

Pure: no I/O, no clock. Times come from the envelopes, so replaying the log rebuilds the
same rows, and an envelope at or below the view's last seq changes nothing, so a batch
that is applied twice (a retry after a database failure, a rebalance) is harmless.
"""

from datetime import datetime
from typing import Any, assert_never

from events.definition import Leg, OperationKind, OpStatus, TxStatus
from events.envelope import Envelope
from events.model import Message
from events.transaction_events import (
    CommandIgnored,
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


class ViewError(ValueError):
    """An envelope that cannot belong to the view it is applied to: a bug upstream (the
    decider is the only writer), never a condition to skip silently."""


class OpView(Message):
    action: str
    position: int
    kind: OperationKind
    provider: str
    operation: str
    op_key: str
    state: OpStatus = OpStatus.PENDING
    attempts: int = 0
    remote_id: str | None = None
    evidence: tuple[dict[str, Any], ...] = ()
    updated_at: datetime


class TxView(Message):
    tenant: str
    tx_id: str
    status: TxStatus
    agent_id: str
    last_seq: int
    created_at: datetime
    updated_at: datetime
    operations: tuple[OpView, ...]


def apply(view: TxView | None, envelope: Envelope) -> TxView:
    if view is not None and envelope.seq <= view.last_seq:
        return view
    event = envelope.event()
    at = datetime.fromisoformat(envelope.occurred_at)
    if view is None:
        if not isinstance(event, TransactionAccepted):
            raise ViewError(
                f"{envelope.tenant}/{envelope.tx_id} seq {envelope.seq}: {envelope.type} "
                "arrived before TransactionAccepted"
            )
        return _accepted(envelope, event, at)
    if (view.tenant, view.tx_id) != (envelope.tenant, envelope.tx_id):
        raise ViewError(
            f"envelope of {envelope.tenant}/{envelope.tx_id} applied to {view.tenant}/{view.tx_id}"
        )
    view = _evolve(view, event, envelope.seq, at)
    return view.model_copy(update={"last_seq": envelope.seq, "updated_at": at})


def _accepted(envelope: Envelope, event: TransactionAccepted, at: datetime) -> TxView:
    return TxView(
        tenant=envelope.tenant,
        tx_id=envelope.tx_id,
        status=TxStatus.ACCEPTED,
        agent_id=event.agent_id,
        last_seq=envelope.seq,
        created_at=at,
        updated_at=at,
        operations=tuple(
            OpView(
                action=spec.action,
                position=position,
                kind=spec.kind,
                provider=spec.provider,
                operation=spec.operation,
                op_key=spec.op_key,
                updated_at=at,
            )
            for position, spec in enumerate(event.operations)
        ),
    )


def _evolve(view: TxView, event: Event, seq: int, at: datetime) -> TxView:
    match event:
        case TransactionAccepted():
            # Only seq 1 accepts; a second one would be a decider bug, and the first
            # intent is the intent.
            return view
        case OperationDispatched():
            if event.leg is Leg.COMPENSATION:
                return _set_op(view, event.action, at, state=OpStatus.COMPENSATING)
            view = _set_op(
                view, event.action, at, state=OpStatus.DISPATCHED, attempts=event.attempt
            )
            if view.status is TxStatus.ACCEPTED:
                view = view.model_copy(update={"status": TxStatus.RUNNING})
            return view
        case OperationUnknown():
            if event.leg is Leg.FORWARD:
                view = _set_op(view, event.action, at, state=OpStatus.UNKNOWN)
            return _add_evidence(view, event.action, event.evidence, event.type, seq, at)
        case OperationConfirmed():
            view = _set_op(
                view, event.action, at, state=OpStatus.CONFIRMED, remote_id=event.remote_id
            )
            return _add_evidence(view, event.action, event.evidence, event.type, seq, at)
        case OperationFailed():
            view = _set_op(view, event.action, at, state=OpStatus.FAILED)
            return _add_evidence(view, event.action, event.evidence, event.type, seq, at)
        case OperationNeedsReview():
            view = _set_op(view, event.action, at, state=OpStatus.MANUAL_REVIEW)
            return _add_evidence(
                view, event.action, event.evidence, event.type, seq, at, reason=event.reason
            )
        case OperationCompensated():
            view = _set_op(view, event.action, at, state=OpStatus.COMPENSATED)
            return _add_evidence(view, event.action, event.evidence, event.type, seq, at)
        case EvidenceRecorded():
            return _add_evidence(view, event.action, event.evidence, event.type, seq, at)
        case ObservationIgnored():
            return _add_evidence(
                view, event.action, event.evidence, event.type, seq, at, reason=event.reason
            )
        case TransactionCommitted():
            return view.model_copy(update={"status": TxStatus.COMMITTED})
        case TransactionFailed():
            status = TxStatus.COMPENSATING if event.compensable else TxStatus.FAILED
            return view.model_copy(update={"status": status})
        case TransactionCompensated():
            return view.model_copy(update={"status": TxStatus.COMPENSATED})
        case TransactionNeedsReview():
            return view.model_copy(update={"status": TxStatus.MANUAL_REVIEW})
        case ReviewResolved():
            if view.status is not TxStatus.MANUAL_REVIEW:
                return view
            resumed = TxStatus.COMPENSATING if event.leg is Leg.COMPENSATION else TxStatus.RUNNING
            return view.model_copy(update={"status": resumed})
        case CompensationPlanned() | TransactionAbortRequested() | CommandIgnored():
            return view
        case _:
            assert_never(event)


def _op(view: TxView, action: str) -> OpView:
    for op in view.operations:
        if op.action == action:
            return op
    raise ViewError(f"{view.tenant}/{view.tx_id} has no operation {action!r}")


def _set_op(view: TxView, action: str, at: datetime, **changes: object) -> TxView:
    _op(view, action)
    ops = tuple(
        op.model_copy(update={**changes, "updated_at": at}) if op.action == action else op
        for op in view.operations
    )
    return view.model_copy(update={"operations": ops})


def _add_evidence(
    view: TxView,
    action: str,
    evidence: Evidence | None,
    event_type: str,
    seq: int,
    at: datetime,
    reason: str | None = None,
) -> TxView:
    if evidence is None:
        return view
    entry: dict[str, Any] = {"event": event_type, "seq": seq, **evidence.model_dump(mode="json")}
    if reason is not None:
        entry["reason"] = reason
    op = _op(view, action)
    return _set_op(view, action, at, evidence=(*op.evidence, entry))
