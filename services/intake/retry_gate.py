"""A review `retry` is judged before its resolution is claimed (POST
/v1/reviews/{id}/resolve): the checks of events.attempt_gate, asked of the
projected log, answer `409 attempt_refused` with the rule and nothing produced.

The decider judges the retry again on its own state and records a refusal; but a review
admits one resolution (services.intake.resolutions), so a retry the decider refuses would
leave the review open with no way left to resolve it. Refused here first, the review
stays open for the resolution a person gives once the rule holds (for a step that needed
approval: approved again, POST /v1/approvals)."""

import json
from datetime import UTC, datetime

import asyncpg

from events.approval_ledger import Approval, evolve_approvals, live
from events.attempt_gate import NewAttempt, attempt_refusals
from events.definition import Leg, OperationSpec
from events.transaction_events import event_from
from services.intake.errors import ApiError

# The events that give and spend approvals (events.approval_ledger).
_APPROVAL_TRAIL = ["OperationApproved", "OperationDispatched", "ApprovalExpired"]


async def check(conn: asyncpg.Connection, tenant: str, review: asyncpg.Record) -> None:
    """Raise 409 `attempt_refused` when a new attempt of the review's leg would be."""
    spec = await _spec(conn, tenant, review["tx_id"], review["action"])
    if spec is None:
        return  # not projected yet: the decider judges it
    rows = await conn.fetch(
        "SELECT type, data FROM events WHERE tenant = $1 AND tx_id = $2"
        " AND type = ANY($3::text[]) AND data->>'action' = $4 ORDER BY seq",
        tenant,
        review["tx_id"],
        _APPROVAL_TRAIL,
        review["action"],
    )
    approvals: tuple[Approval, ...] = ()
    for row in rows:
        approvals = evolve_approvals(approvals, event_from(row["type"], json.loads(row["data"])))
    refusals = attempt_refusals(
        NewAttempt(
            tenant,
            review["tx_id"],
            spec,
            Leg(review["leg"]),
            review["attempt"] + 1,
            datetime.now(UTC),
            "review_retry",
            live(approvals, spec.action),
        )
    )
    if refusals:
        raise ApiError(409, "attempt_refused", "; ".join(refusals))


async def _spec(
    conn: asyncpg.Connection, tenant: str, tx_id: str, action: str
) -> OperationSpec | None:
    operations = await conn.fetchval(
        "SELECT operations FROM intents WHERE tenant = $1 AND tx_id = $2", tenant, tx_id
    )
    for spec in json.loads(operations) if operations else []:
        if spec["action"] == action:
            return OperationSpec.model_validate(spec)
    return None
