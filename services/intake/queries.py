"""What GET /v1/transactions/... reads: the projected views, and the intake's own intent
row for a transaction the projector has not reached yet.

Every query filters by tenant, so another tenant's transaction is indistinguishable from
one that does not exist.
"""

import json
from typing import Any

import asyncpg

from events.definition import OpStatus, TxStatus


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
    plan = await conn.fetchval(
        "SELECT data FROM events WHERE tenant = $1 AND tx_id = $2"
        " AND type = 'CompensationPlanned' ORDER BY seq LIMIT 1",
        tenant,
        tx_id,
    )
    return {
        "tx_id": tx_id,
        "status": tx["status"],
        "agent_id": tx["agent_id"],
        "operations": [{**dict(op), "evidence": json.loads(op["evidence"])} for op in ops],
        "compensation_plan": json.loads(plan)["plan"] if plan is not None else [],
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
