"""Event logs for the integration tests, made by the real decider (no I/O).

tests/unit/txbuilders.py cannot be imported from here without mypy seeing it under two
module names, so the two inputs these tests need are built here.
"""

from datetime import UTC, datetime, timedelta

from events.definition import OperationKind, OperationSpec
from events.envelope import Envelope
from events.inputs import DeciderInput, OperationObserved, Outcome, Source, SubmitTransaction
from services.decider.transaction import handle, initial_state

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def submit(
    steps: list[str], notifications: tuple[str, ...] = (), tx_id: str = "tx-1"
) -> SubmitTransaction:
    kinds = [(a, OperationKind.STEP) for a in steps] + [
        (n, OperationKind.ON_COMMIT) for n in notifications
    ]
    return SubmitTransaction(
        message_id=f"cmd-{tx_id}",
        tenant="demo",
        tx_id=tx_id,
        agent_id="agent-1",
        fingerprint="f" * 64,
        operations=tuple(
            OperationSpec(
                action=action,
                kind=kind,
                provider="sandbox",
                operation="payments.charge",
                payload={"amount": 100},
                op_key=f"key-{tx_id}-{action}",
            )
            for action, kind in kinds
        ),
        issued_at=T0,
    )


def observed(
    action: str, attempt: int, outcome: Outcome, n: int = 0, source: Source = Source.RESPONSE
) -> OperationObserved:
    return OperationObserved(
        message_id=f"obs-{action}-{attempt}-{n}",
        tenant="demo",
        tx_id="tx-1",
        action=action,
        op_key=f"key-tx-1-{action}",
        attempt=attempt,
        source=source,
        outcome=outcome,
        remote_id=f"ch_{action}" if outcome is Outcome.SUCCEEDED else None,
        observed_at=T0 + timedelta(seconds=n + 1),
    )


def log_of(*inputs: DeciderInput, tx_id: str = "tx-1") -> list[Envelope]:
    state, log = initial_state("demo", tx_id), []
    for message in inputs:
        state, envelopes = handle(state, message)
        log += envelopes
    return log
