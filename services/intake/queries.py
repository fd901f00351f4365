"""What the intake's routes read: the projected views (transactions, their events,
reviews, drift), the intake's own intent row for a transaction the projector has not
reached yet, and the operation a webhook's effect belongs to.

Every query a tenant asks filters by tenant, so another tenant's transaction or review is
indistinguishable from one that does not exist. (The guards the intake writes, intents,
review resolutions and webhook deliveries, live with their rules: services.intake.intents,
services.intake.resolutions, services.intake.webhooks.)
"""

import json
from datetime import datetime
from typing import Any

import asyncpg

from events.definition import OpStatus, TxStatus
from reconcilers.webhook_intake import MatchedOperation


async def ping(conn: asyncpg.Connection) -> None:
    await conn.fetchval("SELECT 1")


async def transaction(conn: asyncpg.Connection, tenant: str, tx_id: str) -> dict[str, Any] | None:
    tx = await conn.fetchrow(
        "SELECT status, agent_id FROM transactions WHERE tenant = $1 AND tx_id = $2",
        tenant,
        tx_id,
    )
    if tx is None:
        return await _accepted_intent(conn, tenant, tx_id)
    ops = await conn.fetch(
        "SELECT action, kind, op_key, operation, provider, state, attempts, remote_id, evidence"
        " FROM operations WHERE tenant = $1 AND tx_id = $2 ORDER BY position",
        tenant,
        tx_id,
    )
    # The saga's plan (the undos, in the order they run), from its event: the plan is
    # written once and never changes, so the event is the view.
    # Why a step failed (e.g. `stale_revision`: re-plan) is its TransactionFailed's or
    # OperationRejected's reason, read from those events with the plan (one query).
    rows = await conn.fetch(
        "SELECT type, data FROM events WHERE tenant = $1 AND tx_id = $2"
        " AND type IN ('CompensationPlanned', 'TransactionFailed', 'OperationRejected')"
        " ORDER BY seq",
        tenant,
        tx_id,
    )
    plan: Any = None
    reasons: dict[str, str] = {}
    for row in rows:
        data = json.loads(row["data"])
        if row["type"] == "CompensationPlanned":
            plan = plan if plan is not None else data["plan"]
        else:
            reasons.setdefault(data["action"], data["reason"])
    return {
        "tx_id": tx_id,
        "status": tx["status"],
        "agent_id": tx["agent_id"],
        "operations": [
            {
                **dict(op),
                "evidence": json.loads(op["evidence"]),
                "reason": reasons.get(op["action"]) if op["state"] == "failed" else None,
            }
            for op in ops
        ],
        "compensation_plan": plan if plan is not None else [],
    }


async def _accepted_intent(
    conn: asyncpg.Connection, tenant: str, tx_id: str
) -> dict[str, Any] | None:
    # The intent is durable in Kafka but not projected yet: it is accepted, and nothing of
    # it has been dispatched. A row whose command Kafka never acknowledged is no promise
    # (services.intake.intents): such a tx_id is answered as unknown.
    intent = await conn.fetchrow(
        "SELECT agent_id, operations FROM intents WHERE tenant = $1 AND tx_id = $2 AND produced",
        tenant,
        tx_id,
    )
    if intent is None:
        return None
    return {
        "tx_id": tx_id,
        "status": TxStatus.ACCEPTED.value,
        "agent_id": intent["agent_id"],
        "operations": [
            {
                "action": op["action"],
                "kind": op["kind"],
                "op_key": op["op_key"],
                "operation": op["operation"],
                "provider": op["provider"],
                "state": OpStatus.PENDING.value,
                "attempts": 0,
                "remote_id": None,
                "evidence": [],
                "reason": None,
            }
            for op in json.loads(intent["operations"])
        ],
        "compensation_plan": [],
    }


async def events(conn: asyncpg.Connection, tenant: str, tx_id: str) -> list[dict[str, Any]] | None:
    rows = await conn.fetch(
        "SELECT seq, type, occurred_at, occurred_at_text, prev_hash, hash, data, event_id,"
        " causation_id, tenant, tx_id, schema_version, correlation_id"
        " FROM events WHERE tenant = $1 AND tx_id = $2 ORDER BY seq",
        tenant,
        tx_id,
    )
    if not rows:
        known = await conn.fetchval(
            "SELECT 1 FROM intents WHERE tenant = $1 AND tx_id = $2 AND produced",
            tenant,
            tx_id,
        )
        return [] if known else None
    # Every field of the envelope is returned, so the hash chain can be checked from
    # this answer alone.
    return [
        {
            **{k: v for k, v in row.items() if k != "occurred_at_text"},
            "occurred_at": row["occurred_at_text"] or row["occurred_at"].isoformat(),
            "data": json.loads(row["data"]),
        }
        for row in rows
    ]


_REVIEW = "r.id, r.tx_id, r.action, r.op_key, r.reason, r.state, r.created_at"


async def reviews(
    conn: asyncpg.Connection, tenant: str, *, state: str | None, created_before: datetime | None
) -> list[asyncpg.Record]:
    conditions: list[str] = ["r.tenant = $1"]
    args: list[object] = [tenant]
    if state is not None:
        args.append(state)
        conditions.append(f"r.state = ${len(args)}")
    if created_before is not None:
        args.append(created_before)
        conditions.append(f"r.created_at <= ${len(args)}")
    rows: list[asyncpg.Record] = await conn.fetch(
        f"SELECT {_REVIEW} FROM reviews r WHERE {' AND '.join(conditions)}"
        " ORDER BY r.created_at, r.id",
        *args,
    )
    return rows


async def review(conn: asyncpg.Connection, tenant: str, review_id: str) -> asyncpg.Record | None:
    """A review with its operation, whose evidence is the review's whole trail."""
    row: asyncpg.Record | None = await conn.fetchrow(
        f"SELECT {_REVIEW}, r.leg, r.attempt, r.resolved_at, r.resolution, r.note,"
        " r.actor, o.operation, o.provider, o.evidence"
        " FROM reviews r LEFT JOIN operations o"
        " ON o.tenant = r.tenant AND o.tx_id = r.tx_id AND o.action = r.action"
        " WHERE r.tenant = $1 AND r.id = $2",
        tenant,
        review_id,
    )
    return row


async def review_state(
    conn: asyncpg.Connection, tenant: str, review_id: str
) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(
        "SELECT tx_id, state, action, leg, attempt FROM reviews WHERE tenant = $1 AND id = $2",
        tenant,
        review_id,
    )
    return row


async def drift(conn: asyncpg.Connection, tenant: str | None) -> list[asyncpg.Record]:
    """A tenant's drift and the drift that belongs to no tenant (shown redacted); for no
    tenant (a deployment admin), the drift that belongs to no tenant only."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT drift_id, tenant, kind, provider, tx_id, action, op_key, effect_id, detail,"
        " detected_at FROM drift WHERE tenant = $1 OR tenant IS NULL"
        " ORDER BY detected_at, drift_id",
        tenant,
    )
    return rows


# Both lookups are by indexed equality, so they stay index scans whatever plan Postgres
# picks, the generic plan asyncpg's prepared statements end up with included (issue 7,
# item 17; tests/integration/test_webhook_lookup_plans.py). No LIMIT: a key names one leg,
# so at most a row or two match, and with a LIMIT the generic plan bets on a sequential
# scan finding a match early, which for an effect recon does not know reads the table.
OPERATION_BY_KEY = (
    "SELECT tenant, tx_id, action, op_key, comp_op_key FROM operations"
    " WHERE op_key = ANY($1::text[]) OR comp_op_key = ANY($1::text[])"
)
INTENT_BY_KEY = "SELECT tenant, tx_id, action, key FROM intent_keys WHERE key = ANY($1::text[])"


async def operation_by_key(
    conn: asyncpg.Connection, keys: tuple[str, ...]
) -> MatchedOperation | None:
    """The operation leg recon made the effect under, by either of its keys. The projected
    operations come first; the intake's own intent keys cover a provider that calls back
    before the projector has caught up with the dispatch."""
    if not keys:
        return None
    row = await conn.fetchrow(OPERATION_BY_KEY, list(keys))
    if row is not None:
        key = row["op_key"] if row["op_key"] in keys else row["comp_op_key"]
        return MatchedOperation(
            tenant=row["tenant"], tx_id=row["tx_id"], action=row["action"], op_key=key
        )
    row = await conn.fetchrow(INTENT_BY_KEY, list(keys))
    if row is None:
        return None
    return MatchedOperation(
        tenant=row["tenant"], tx_id=row["tx_id"], action=row["action"], op_key=row["key"]
    )
