"""Transactions whose charge waited for a person's approval and ran on it, as the real
decider writes them (transactions.transaction.handle): a reserve, the charge gated
(`approval_required`, as the intake marks a write under RECON_APPROVAL_REQUIRED=write),
an operator's approval carrying the preview he was shown, both calls answered, committed.
Eight events each, one of them OperationApproved with its approval id: a tenant's history
for the reads that find a step by its approval id (services.devtools.approval_lookup_cost,
tests/integration/test_approval_lookup.py).

Pure: the same arguments give the same events.
"""

from datetime import datetime, timedelta

from events.approval_events import OperationApproved
from events.approval_inputs import ApproveOperation
from events.definition import OperationKind
from events.envelope import Envelope
from events.inputs import DeciderInput, Source, SubmitTransaction
from events.keys import approval_id
from events.preview import StepPreview, preview_digest
from services.devtools.synthetic_log import answer, operation_spec
from transactions.transaction import handle, initial_state

APPROVER = "ops@example.com"


def approved_transaction(tenant: str, tx_id: str, at: datetime) -> list[Envelope]:
    """The transaction's events, submitted at `at`, approved a second later."""
    fingerprint = tx_id.encode().hex().rjust(64, "0")[-64:]
    reserve = operation_spec(
        tenant,
        tx_id,
        "reserve",
        "inventory.reserve",
        OperationKind.STEP,
        {"sku": "sku-1", "qty": 1},
        "inventory.release",
    )
    charge = operation_spec(
        tenant,
        tx_id,
        "charge",
        "payments.charge",
        OperationKind.STEP,
        {"amount": 1299, "currency": "usd", "customer": f"cus_{tx_id}"},
        "payments.refund",
    ).model_copy(update={"approval_required": True})  # as the intake marks a write
    # The preview an operator is shown of the gated charge (services.intake.previews).
    shown = (
        StepPreview(
            action="charge",
            provider="sandbox",
            operation="payments.charge",
            side_effect="write",
            reversibility="compensating_only",
            approval_required=True,
            resource=None,
            current_revision=None,
            effects={},
            notifications=[],
            refusal=None,
        ),
    )
    issued = at + timedelta(seconds=1)
    approval = approval_id(tenant, tx_id, "charge", fingerprint, issued.isoformat())
    inputs: list[DeciderInput] = [
        SubmitTransaction(
            message_id=f"submit:{tenant}:{tx_id}",
            tenant=tenant,
            tx_id=tx_id,
            agent_id="agent-7",
            fingerprint=fingerprint,
            operations=(reserve, charge),
            issued_at=at,
        ),
        answer(tenant, tx_id, reserve, at, 1, Source.RESPONSE),
        ApproveOperation(
            message_id=f"approve-{approval}",
            tenant=tenant,
            tx_id=tx_id,
            action="charge",
            approval_id=approval,
            proposal_digest=fingerprint,
            preview_digest=preview_digest(tx_id, fingerprint, shown),
            approver=APPROVER,
            expires_at=issued + timedelta(minutes=10),
            issued_at=issued,
            shown=shown,
        ),
        answer(tenant, tx_id, charge, issued, 1, Source.RESPONSE),
    ]
    state = initial_state(tenant, tx_id)
    events: list[Envelope] = []
    for message in inputs:
        state, envelopes = handle(state, message)
        events += envelopes
    return events


def approval_of(events: list[Envelope]) -> str:
    """The approval id the transaction's charge ran on."""
    approved = [e.event() for e in events if e.type == "OperationApproved"]
    assert len(approved) == 1 and isinstance(approved[0], OperationApproved), approved
    return approved[0].approval_id
