"""Builders for decider inputs in tests (no I/O)."""

from datetime import UTC, datetime, timedelta

from events.definition import Compensation, OperationKind, OperationSpec
from events.inputs import OperationObserved, Outcome, Source, SubmitTransaction
from events.keys import op_key

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def spec(
    action: str, kind: OperationKind = OperationKind.STEP, operation: str = "payments.charge"
) -> OperationSpec:
    return OperationSpec(
        action=action,
        kind=kind,
        provider="sandbox",
        operation=operation,
        payload={"amount": 100},
        compensation=Compensation(operation="payments.refund"),
        op_key=op_key(
            tenant="demo", environment="test", provider="sandbox", tx_id="tx-1", action=action
        ),
    )


def submit(
    steps: list[str], notifications: tuple[str, ...] = (), tx_id: str = "tx-1"
) -> SubmitTransaction:
    ops = [spec(a) for a in steps] + [
        spec(n, OperationKind.ON_COMMIT, "email.send") for n in notifications
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
    action: str, attempt: int, outcome: Outcome, n: int = 0, source: Source = Source.RESPONSE
) -> OperationObserved:
    return OperationObserved(
        message_id=f"obs-{action}-{attempt}-{source.value}-{outcome.value}-{n}",
        tenant="demo",
        tx_id="tx-1",
        action=action,
        op_key=spec(action).op_key,
        attempt=attempt,
        source=source,
        outcome=outcome,
        remote_id=f"ch_{action}" if outcome is Outcome.SUCCEEDED else None,
        observed_at=T0 + timedelta(seconds=n + 1),
    )
