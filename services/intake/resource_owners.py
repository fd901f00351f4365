"""The intake's side of services.governance.resources: refuse a submission (or a preview)
that names a provider resource its tenant has no claim to, before anything is recorded.

What the tenant's confirmed operations created is read from the projected operations
(`remote_id`), scoped to the tenant: one tenant's charge is never another's to refund.
"""

from events.legs import LegStatus
from projections.operation_row import legs_of
from services.governance.resources import (
    NamedResource,
    ResourceNotOwned,
    held_by_account,
    named_resource,
)
from services.intake.errors import ApiError
from services.intake.submission import SubmissionRequest
from services.intake.tenant_store import TenantStore


def named_resources(submission: SubmissionRequest) -> list[NamedResource]:
    named = []
    for _, op in submission.operations():
        found = named_resource(op.action, op.operation, op.provider_payload())
        if found is not None:
            named.append(found)
        if op.compensation is not None and op.compensation.payload is not None:
            compensation = named_resource(
                op.action, op.compensation.operation, op.compensation.payload
            )
            if compensation is not None:
                named.append(compensation)
    return named


def unheld(
    tenant: str, submission: SubmissionRequest, accounts: dict[str, tuple[str, ...]]
) -> list[NamedResource]:
    """The resources `submission` names that none of the tenant's own accounts holds: each
    must be one of its operations' (refuse_foreign), which only a statement can tell. Most
    submissions name none, and are judged without one."""
    held = accounts.get(tenant, ())
    return [
        named for named in named_resources(submission) if not held_by_account(named.value, held)
    ]


async def refuse_foreign(store: TenantStore, unheld: list[NamedResource]) -> None:
    """Raise a 403 `resource_not_owned` naming the first of the `unheld` resources the
    tenant's operations did not create."""
    for named in unheld:
        if not await _created(store, named.value):
            refusal = ResourceNotOwned(named)
            raise ApiError(403, refusal.code, str(refusal))


async def _created(store: TenantStore, remote_id: str) -> bool:
    """Whether one of the tenant's operations created `remote_id`: its forward leg was
    confirmed. The leg's own state, not the operation's summary: a step whose undo is in
    review shows manual_review, and its forward effect was confirmed all the same; one
    compensated since created it too (a refunded charge is still the tenant's, and the
    provider judges what is left of it)."""
    for row in await store.operations_on(remote_id):
        forward, _ = legs_of(row)
        if forward.status is LegStatus.CONFIRMED:
            return True
    return False
