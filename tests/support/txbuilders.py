"""Builders for decider inputs and event logs in tests (no I/O)."""

from datetime import UTC, datetime, timedelta
from functools import cache

from events.definition import Compensation, Leg, OperationKind, OperationSpec, Resolution
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
from events.keys import compensation_key, op_key, review_id
from events.observation import Seen, observation
from transactions.transaction import handle, initial_state

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@cache  # specs are frozen; observed() asks for the same few thousands of times per run
def spec(
    action: str,
    kind: OperationKind = OperationKind.STEP,
    operation: str = "payments.charge",
    tx_id: str = "tx-1",
    compensable: bool = True,
) -> OperationSpec:
    key = op_key(tenant="demo", environment="test", provider="sandbox", tx_id=tx_id, action=action)
    has_compensation = kind is OperationKind.STEP and compensable
    compensation = Compensation(operation="payments.refund") if has_compensation else None
    return OperationSpec(
        action=action,
        kind=kind,
        provider="sandbox",
        operation=operation,
        payload={"amount": 100},
        op_key=key,
        compensation=compensation,
        compensation_key=compensation_key(key) if compensation else None,
    )


def submit(
    steps: list[str],
    notifications: tuple[str, ...] = (),
    tx_id: str = "tx-1",
    on_compensated: tuple[str, ...] = (),
    uncompensated: tuple[str, ...] = (),
) -> SubmitTransaction:
    """`uncompensated`: the steps (among `steps`) that have no undo."""
    ops = (
        [spec(a, tx_id=tx_id, compensable=a not in uncompensated) for a in steps]
        + [spec(n, OperationKind.ON_COMMIT, "email.send", tx_id) for n in notifications]
        + [spec(n, OperationKind.ON_COMPENSATED, "email.send", tx_id) for n in on_compensated]
    )
    return SubmitTransaction(
        message_id=f"cmd-{tx_id}",
        tenant="demo",
        tx_id=tx_id,
        agent_id="agent-1",
        fingerprint="f" * 64,
        operations=tuple(ops),
        issued_at=T0,
    )


def observed(
    action: str,
    attempt: int,
    outcome: Outcome,
    n: int = 0,
    source: Source = Source.RESPONSE,
    tx_id: str = "tx-1",
    leg: Leg = Leg.FORWARD,
) -> OperationObserved:
    key = spec(action, tx_id=tx_id).op_key
    return observation(
        message_id=f"obs-{action}-{leg.value}-{attempt}-{source.value}-{outcome.value}-{n}",
        tenant="demo",
        tx_id=tx_id,
        action=action,
        op_key=key if leg is Leg.FORWARD else compensation_key(key),
        attempt=attempt,
        source=source,
        seen=Seen(outcome, remote_id=f"ch_{action}" if outcome is Outcome.SUCCEEDED else None),
        observed_at=T0 + timedelta(seconds=n + 1),
    )


def abort(n: int = 0) -> AbortTransaction:
    return AbortTransaction(
        message_id=f"abort-{n}",
        tenant="demo",
        tx_id="tx-1",
        actor="agent",
        reason="changed its mind",
        issued_at=T0 + timedelta(seconds=n),
    )


def plan(*actions: str) -> PlanCompensation:
    return PlanCompensation(
        message_id=f"plan-{'-'.join(actions)}",
        tenant="demo",
        tx_id="tx-1",
        plan=actions,
        issued_at=T0,
    )


def compensate(action: str) -> CompensateOperation:
    return CompensateOperation(
        message_id=f"compensate-{action}", tenant="demo", tx_id="tx-1", action=action, issued_at=T0
    )


def request_review(
    action: str, attempt: int, leg: Leg = Leg.FORWARD, tx_id: str = "tx-1"
) -> RequestReview:
    return RequestReview(
        message_id=f"request-review-{action}-{leg.value}-{attempt}",
        tenant="demo",
        tx_id=tx_id,
        action=action,
        leg=leg,
        attempt=attempt,
        reason="lookup_budget_exhausted",
        issued_at=T0,
    )


def resolve(
    action: str, attempt: int, resolution: Resolution, leg: Leg = Leg.FORWARD, n: int = 0
) -> ResolveReview:
    return ResolveReview(
        message_id=f"resolve-{action}-{leg.value}-{attempt}-{resolution.value}-{n}",
        tenant="demo",
        tx_id="tx-1",
        review_id=review_id("demo", "tx-1", action, leg.value, attempt),
        resolution=resolution,
        note="checked with the provider",
        actor="ops@example.com",
        issued_at=T0 + timedelta(seconds=n),
    )


def log_of(*inputs: DeciderInput, tx_id: str = "tx-1") -> list[Envelope]:
    """The events the real decider writes for these inputs."""
    state, log = initial_state("demo", tx_id), []
    for message in inputs:
        state, envelopes = handle(state, message)
        log += envelopes
    return log


def log_with_note(tx_id: str, note: str) -> list[Envelope]:
    """The events of submitting one charge whose payload carries `note` (each of them holds
    the payload): a NUL in it is text Postgres cannot store (projections.decode)."""
    command = submit(["charge"], tx_id=tx_id)
    charge = command.operations[0].model_copy(update={"payload": {"amount": 100, "note": note}})
    return log_of(command.model_copy(update={"operations": (charge,)}), tx_id=tx_id)


def compensated_history() -> list[DeciderInput]:
    """A transaction compensated to its end: its second step refused, the first undone, and
    its `on_compensated` notification ("sorry") confirmed."""
    return [
        submit(["reserve", "charge"], on_compensated=("sorry",)),
        observed("reserve", 1, Outcome.SUCCEEDED),
        observed("charge", 1, Outcome.REJECTED),
        plan("reserve"),
        compensate("reserve"),
        observed("reserve", 1, Outcome.SUCCEEDED, leg=Leg.COMPENSATION),
        observed("sorry", 1, Outcome.SUCCEEDED),
    ]
