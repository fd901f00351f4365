"""Builders for decider inputs and event logs in tests (no I/O)."""

from datetime import UTC, datetime, timedelta

from events.definition import Compensation, OperationKind, OperationSpec
from events.envelope import Envelope
from events.inputs import DeciderInput, OperationObserved, Outcome, Source, SubmitTransaction
from events.keys import op_key
from services.decider.transaction import handle, initial_state

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def spec(
    action: str,
    kind: OperationKind = OperationKind.STEP,
    operation: str = "payments.charge",
    tx_id: str = "tx-1",
) -> OperationSpec:
    return OperationSpec(
        action=action,
        kind=kind,
        provider="sandbox",
        operation=operation,
        payload={"amount": 100},
        compensation=Compensation(operation="payments.refund"),
        op_key=op_key(
            tenant="demo", environment="test", provider="sandbox", tx_id=tx_id, action=action
        ),
    )


def submit(
    steps: list[str], notifications: tuple[str, ...] = (), tx_id: str = "tx-1"
) -> SubmitTransaction:
    ops = [spec(a, tx_id=tx_id) for a in steps] + [
        spec(n, OperationKind.ON_COMMIT, "email.send", tx_id) for n in notifications
    ]
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
) -> OperationObserved:
    return OperationObserved(
        message_id=f"obs-{action}-{attempt}-{source.value}-{outcome.value}-{n}",
        tenant="demo",
        tx_id=tx_id,
        action=action,
        op_key=spec(action, tx_id=tx_id).op_key,
        attempt=attempt,
        source=source,
        outcome=outcome,
        remote_id=f"ch_{action}" if outcome is Outcome.SUCCEEDED else None,
        observed_at=T0 + timedelta(seconds=n + 1),
    )


def log_of(*inputs: DeciderInput, tx_id: str = "tx-1") -> list[Envelope]:
    """The events the real decider writes for these inputs."""
    state, log = initial_state("demo", tx_id), []
    for message in inputs:
        state, envelopes = handle(state, message)
        log += envelopes
    return log
