"""Builders for the approval gate's decider inputs (no I/O): a transaction whose second
step is a destructive, gated waitlist.promote after a compensable reserve."""

from datetime import datetime, timedelta

from events.approval_inputs import ApproveOperation, RejectOperation
from events.definition import OperationKind, OperationSpec
from events.inputs import DeciderInput, Outcome, SubmitTransaction
from events.keys import op_key
from events.preview import StepPreview, preview_digest
from support.txbuilders import T0, observed, spec

AGENT = "agent-1"
FINGERPRINT = "f" * 64


def gated_spec(action: str = "promote", *, planned: bool = True) -> OperationSpec:
    """`planned`: the agent names the revision it planned against (expected_revision)."""
    key = op_key(tenant="demo", environment="test", provider="sandbox", tx_id="tx-1", action=action)
    payload: dict[str, object] = {"resource": "class-1", "user": "u6"}
    if planned:
        payload["expected_revision"] = 41
    return OperationSpec(
        action=action,
        kind=OperationKind.STEP,
        provider="sandbox",
        operation="waitlist.promote",
        payload=payload,
        op_key=key,
        approval_required=True,
    )


def gated_submit(*, planned: bool = True) -> SubmitTransaction:
    return SubmitTransaction(
        message_id="cmd-tx-1",
        tenant="demo",
        tx_id="tx-1",
        agent_id=AGENT,
        fingerprint=FINGERPRINT,
        operations=(spec("reserve"), gated_spec(planned=planned)),
        issued_at=T0,
    )


def shown_step(
    action: str = "promote", *, revision: int | None = None, gated: bool = True
) -> StepPreview:
    """`action` as its provider previewed it: the gated promotion of gated_spec."""
    return StepPreview(
        action=action,
        provider="sandbox",
        operation="waitlist.promote",
        side_effect="destructive",
        reversibility="compensating_only",
        approval_required=gated,
        resource="class-1",
        current_revision=revision,
        effects={"actor_position": {"from": 6, "to": 5}},
        notifications=[],
        refusal=None,
    )


def approve(
    n: int = 0,
    *,
    approval_id: str = "ap-1",
    digest: str = FINGERPRINT,
    approver: str = "ops@example.com",
    at: datetime | None = None,
    valid_s: float = 600,
    action: str = "promote",
    revision: int | None = None,
    shown: tuple[StepPreview, ...] | None = None,
    preview: str | None = None,
) -> ApproveOperation:
    """An approval as the intake builds it: it carries the preview shown (by default the
    promotion at `revision`) and that preview's digest (unless `preview` names another)."""
    issued = at or T0 + timedelta(seconds=n)
    steps = (shown_step(revision=revision),) if shown is None else shown
    return ApproveOperation(
        message_id=f"approve-{approval_id}-{n}",
        tenant="demo",
        tx_id="tx-1",
        action=action,
        approval_id=approval_id,
        proposal_digest=digest,
        preview_digest=preview or preview_digest("tx-1", digest, steps),
        approver=approver,
        expires_at=issued + timedelta(seconds=valid_s),
        issued_at=issued,
        shown=steps,
    )


def reject(n: int = 0, reason: str = "rejected", action: str = "promote") -> RejectOperation:
    return RejectOperation(
        message_id=f"reject-{action}-{n}",
        tenant="demo",
        tx_id="tx-1",
        action=action,
        reason=reason,
        actor="ops@example.com",
        issued_at=T0 + timedelta(seconds=n),
    )


# Two histories of the gated transaction (tests of finished transactions and late inputs):
# the promotion never reached (the reserve before it was declined), and the promotion run
# on approval ap-1, the transaction committed.
GATE_NEVER_REACHED: list[DeciderInput] = [gated_submit(), observed("reserve", 1, Outcome.REJECTED)]
RAN_ON_APPROVAL: list[DeciderInput] = [
    gated_submit(),
    observed("reserve", 1, Outcome.SUCCEEDED),
    approve(5),
    observed("promote", 1, Outcome.SUCCEEDED, n=6),
]
