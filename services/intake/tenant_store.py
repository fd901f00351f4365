"""Every query the intake's routes ask of one tenant's rows: the projected views
(transactions, operations, events, reviews, drift), the projected log the decider's fold
reads, and the intake's own intent row for a transaction the projector has not reached yet.

A route builds one `TenantStore` from the authenticated principal (`who.tenant`, never
from a body) and asks it; no route module holds SQL (tests/unit/test_intake_routes_hold_no_sql.py).
The tenant is bound once, here, so every read filters by it and another tenant's
transaction or review is indistinguishable from one that does not exist
(tests/integration/test_tenant_store.py asks every read method with another tenant's ids).

The write guards with rules of their own are stores too, bound to the tenant the same way
(they are handed the route's TenantStore): services.intake.abort_record,
services.intake.resolutions; services.intake.intents is bound to its Intent's tenant.
Reads that belong to no tenant live elsewhere: the webhook ingress's (an effect's key
names its tenant: services.intake.webhook_store) and the admin's drift (`unowned_drift`).
"""

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from events.definition import OpStatus, TxStatus
from events.transaction_events import TransactionAccepted, event_from
from projections.operation_row import either_leg_in, operation_view
from projections.session_row import session_fields
from projections.view import OpView
from transactions.ownership import Owner
from transactions.state import TransactionState
from transactions.transaction import replay

_REVIEW = "r.id, r.tx_id, r.action, r.op_key, r.reason, r.state, r.created_at"
_DRIFT = (
    "SELECT drift_id, tenant, kind, provider, tx_id, action, op_key, effect_id, detail,"
    " detected_at FROM drift"
)


class _Where:
    """A list query's conditions and their arguments, numbered as they are added: each
    `{}` of a condition becomes the next `$n`, so no query counts its parameters by hand.
    Values only ever travel as arguments; the SQL text is the caller's constants."""

    def __init__(self, tenant: str, tenant_condition: str) -> None:
        self.args: list[object] = []
        self.conditions: list[str] = []
        self.add(tenant_condition, tenant)

    def param(self, value: object) -> str:
        self.args.append(value)
        return f"${len(self.args)}"

    def add(self, condition: str, *values: object) -> None:
        self.conditions.append(condition.format(*(self.param(v) for v in values)))

    def __str__(self) -> str:
        return " AND ".join(self.conditions)


# The console's counts of what waits on a person or a provider, for tenant $1.
ATTENTION = (
    "SELECT (SELECT count(*) FROM reviews WHERE tenant = $1 AND state = 'open')"
    " AS reviews_open,"
    " (SELECT min(created_at) FROM reviews WHERE tenant = $1 AND state = 'open')"
    " AS oldest_review,"
    " count(*) AS unknown, min(updated_at) AS oldest_unknown FROM operations"
    " WHERE tenant = $1 AND " + either_leg_in(f"'{OpStatus.UNKNOWN.value}'")
)


# The step approval id $2 names in tenant $1, from the approval or refusal the decider
# recorded. Read by the partial index events_approval_id (migration 0015), whose expression
# and predicate these conditions repeat word for word, as the planner needs them to;
# without it the tenant's every event is read (docs/benchmark.md, "A step found by its
# approval id"). tests/integration/test_approval_lookup.py checks the plan.
APPROVED_STEP = (
    "SELECT o.tx_id, o.action, o.state FROM events e JOIN operations o"
    " ON o.tenant = e.tenant AND o.tx_id = e.tx_id AND o.action = e.data->>'action'"
    " WHERE e.tenant = $1 AND e.type IN ('OperationApproved', 'ApprovalRefused')"
    " AND e.data->>'approval_id' = $2 LIMIT 1"
)


@dataclass(frozen=True)
class Sessions:
    """What a session's command is judged on, as the transaction's row holds it."""

    status: TxStatus
    owner: Owner | None
    session_events: int | None  # None: the row's were not projected (migration 0014)


@dataclass(frozen=True)
class TenantStore:
    conn: asyncpg.Connection
    tenant: str

    async def transaction(self, tx_id: str) -> dict[str, Any] | None:
        """The transaction as `GET /v1/transactions/{tx_id}` shows it, from one snapshot:
        read statement by statement, a projector commit between them showed a step in
        `manual_review` under a transaction still `running` (seen in CI)."""
        async with self.conn.transaction(isolation="repeatable_read", readonly=True):
            return await self._transaction(tx_id)

    async def _transaction(self, tx_id: str) -> dict[str, Any] | None:
        tx = await self.conn.fetchrow(
            "SELECT status, agent_id FROM transactions WHERE tenant = $1 AND tx_id = $2",
            self.tenant,
            tx_id,
        )
        if tx is None:
            return await self._accepted_intent(tx_id)
        ops = await self.conn.fetch(
            "SELECT action, kind, op_key, operation, provider, state, attempts, remote_id,"
            " evidence FROM operations WHERE tenant = $1 AND tx_id = $2 ORDER BY position",
            self.tenant,
            tx_id,
        )
        # The saga's plan (the undos, in the order they run), from its event: the plan is
        # written once and never changes, so the event is the view.
        # Why a step failed (e.g. `stale_revision`: re-plan) is its TransactionFailed's or
        # OperationRejected's reason, read from those events with the plan (one query).
        rows = await self.conn.fetch(
            "SELECT type, data FROM events WHERE tenant = $1 AND tx_id = $2"
            " AND type IN ('CompensationPlanned', 'TransactionFailed', 'OperationRejected')"
            " ORDER BY seq",
            self.tenant,
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

    async def produced_intent(self, tx_id: str) -> asyncpg.Record | None:
        """The intake's intent row, once Kafka acknowledged its command. A row whose
        command Kafka never acknowledged is no promise (services.intake.intents): such a
        tx_id is answered as unknown."""
        row: asyncpg.Record | None = await self.conn.fetchrow(
            "SELECT agent_id, session_id, operations, attempted_at FROM intents"
            " WHERE tenant = $1 AND tx_id = $2 AND produced",
            self.tenant,
            tx_id,
        )
        return row

    async def _accepted_intent(self, tx_id: str) -> dict[str, Any] | None:
        # The intent is durable in Kafka but not projected yet: it is accepted, and nothing
        # of it has been dispatched.
        intent = await self.produced_intent(tx_id)
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

    async def events(
        self, tx_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[dict[str, Any]] | None:
        """The transaction's projected events in seq order (those after `after_seq`, at
        most `limit`); [] for an accepted intent not projected yet (or past its last
        event), None for a tx_id the tenant never had accepted."""
        rows = await self.conn.fetch(
            "SELECT seq, type, occurred_at, occurred_at_text, prev_hash, hash, data, event_id,"
            " causation_id, tenant, tx_id, schema_version, correlation_id, canon"
            " FROM events WHERE tenant = $1 AND tx_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
            self.tenant,
            tx_id,
            after_seq,
            limit,
        )
        if not rows:
            return [] if await self._known(tx_id) else None
        # Every field of the envelope is returned, so the hash chain can be checked from
        # this answer alone.
        return [
            {
                # `canon` only where the event names a form: a legacy-json event's hash
                # covers no such field (events.envelope).
                **{
                    k: v
                    for k, v in row.items()
                    if k != "occurred_at_text" and not (k == "canon" and v is None)
                },
                "occurred_at": row["occurred_at_text"] or row["occurred_at"].isoformat(),
                "data": json.loads(row["data"]),
            }
            for row in rows
        ]

    async def sessions(self, tx_id: str) -> Sessions | None:
        """The transaction's status, owner and count of commands from agent sessions, from
        its row (projections.session_row): one primary-key read, whatever its chain's
        length. None when it is not projected yet; `session_events` None when the row's
        were not projected (a row from before migration 0014): then only the chain's fold
        (`projected_state`) has them."""
        row = await self.conn.fetchrow(
            "SELECT status, last_seq, owner, session_events, session_seq FROM transactions"
            " WHERE tenant = $1 AND tx_id = $2",
            self.tenant,
            tx_id,
        )
        if row is None:
            return None
        fields = session_fields(row)
        return Sessions(
            status=TxStatus(row["status"]),
            owner=fields["owner"],
            session_events=fields["session_events"],
        )

    async def operation_of(self, tx_id: str, action: str) -> OpView | None:
        """The projected operation `action` of the transaction, with the decider's legs."""
        row = await self.conn.fetchrow(
            "SELECT * FROM operations WHERE tenant = $1 AND tx_id = $2 AND action = $3",
            self.tenant,
            tx_id,
            action,
        )
        return operation_view(row) if row is not None else None

    async def proposal_digest(self, tx_id: str) -> str | None:
        """The transaction's fingerprint (the digest of its canonical proposal, which a
        preview and an approval name), from its projected TransactionAccepted: the event
        the decider's evolve takes `state.fingerprint` from, and the only one that sets it.
        One row, the chain's first, whatever the chain's length; None when it is not
        projected yet."""
        row = await self.conn.fetchrow(
            "SELECT data FROM events WHERE tenant = $1 AND tx_id = $2"
            " AND type = 'TransactionAccepted' ORDER BY seq LIMIT 1",
            self.tenant,
            tx_id,
        )
        if row is None:
            return None
        accepted = event_from("TransactionAccepted", json.loads(row["data"]))
        assert isinstance(accepted, TransactionAccepted)
        return accepted.fingerprint

    async def projected_state(self, tx_id: str) -> TransactionState | None:
        """The transaction as its projected log shows it, folded by the decider's own rules
        (transactions.transaction.replay); None when no event of it is projected yet. One
        read of the events' primary key; a live transaction's log is short (its
        session-caused events are capped, transactions.input_bounds)."""
        rows = await self.conn.fetch(
            "SELECT type, data FROM events WHERE tenant = $1 AND tx_id = $2 ORDER BY seq",
            self.tenant,
            tx_id,
        )
        if not rows:
            return None
        events = (event_from(r["type"], json.loads(r["data"])) for r in rows)
        return replay(self.tenant, tx_id, events)

    async def operation(self, op_key: str) -> asyncpg.Record | None:
        """The projected operation either of whose keys (its own, its undo's) is `op_key`,
        with its transaction's status. Both keys are indexed (operations_op_key,
        operations_comp_key_set, partial: the rows with an undo)."""
        row: asyncpg.Record | None = await self.conn.fetchrow(
            "SELECT o.tx_id, o.action, o.state, o.remote_id, t.status FROM operations o"
            " JOIN transactions t ON t.tenant = o.tenant AND t.tx_id = o.tx_id"
            " WHERE o.tenant = $1 AND (o.op_key = $2 OR o.comp_op_key = $2)",
            self.tenant,
            op_key,
        )
        return row

    async def step(self, key: str) -> asyncpg.Record | None:
        """The step an op key names, or the one an approval id (`ap_...`, POST
        /v1/approvals) approved, found once the decider recorded the approval."""
        row: asyncpg.Record | None = await self.conn.fetchrow(
            "SELECT tx_id, action, state FROM operations WHERE tenant = $1 AND op_key = $2",
            self.tenant,
            key,
        )
        if row is None:
            row = await self.conn.fetchrow(APPROVED_STEP, self.tenant, key)
        return row

    async def operations_on(self, remote_id: str) -> list[asyncpg.Record]:
        """The tenant's operations that name the provider resource `remote_id`, with the
        columns projections.operation_row.legs_of reads their legs from
        (services.intake.resource_owners judges which legs count)."""
        rows: list[asyncpg.Record] = await self.conn.fetch(
            "SELECT state, attempts, comp_state, comp_attempts, open_review_id"
            " FROM operations WHERE tenant = $1 AND remote_id = $2",
            self.tenant,
            remote_id,
        )
        return rows

    async def reviews(
        self,
        *,
        state: str | None,
        created_before: datetime | None,
        after: tuple[datetime, str] | None = None,
        limit: int | None = None,
    ) -> list[asyncpg.Record]:
        """Oldest first: the reviews after `after` (a page's last `(created_at, id)`)."""
        where = _Where(self.tenant, "r.tenant = {}")
        if state is not None:
            where.add("r.state = {}", state)
        if created_before is not None:
            where.add("r.created_at <= {}", created_before)
        if after is not None:
            where.add("(r.created_at, r.id) > ({}, {})", *after)
        rows: list[asyncpg.Record] = await self.conn.fetch(
            f"SELECT {_REVIEW} FROM reviews r WHERE {where}"
            f" ORDER BY r.created_at, r.id LIMIT {where.param(limit)}",
            *where.args,
        )
        return rows

    async def transactions(
        self,
        *,
        status: str | None = None,
        agent_id: str | None = None,
        provider: str | None = None,
        operation: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        before: tuple[datetime, str] | None = None,
        limit: int | None = None,
    ) -> list[asyncpg.Record]:
        """Newest first, the projected transactions matching every filter given, those
        after `before` (a page's last `(created_at, tx_id)`), each with its steps' summary.
        A provider or operation filter matches a transaction having such a step."""
        where = _Where(self.tenant, "t.tenant = {}")
        for column, value in (("t.status", status), ("t.agent_id", agent_id)):
            if value is not None:
                where.add(f"{column} = {{}}", value)
        steps = [
            f"{column} = {where.param(value)}"
            for column, value in (("o.provider", provider), ("o.operation", operation))
            if value is not None
        ]
        if steps:
            where.add(
                "EXISTS (SELECT 1 FROM operations o WHERE o.tenant = t.tenant"
                f" AND o.tx_id = t.tx_id AND {' AND '.join(steps)})"
            )
        if created_after is not None:
            where.add("t.created_at >= {}", created_after)
        if created_before is not None:
            where.add("t.created_at < {}", created_before)
        if before is not None:
            where.add("(t.created_at, t.tx_id) < ({}, {})", *before)
        rows: list[asyncpg.Record] = await self.conn.fetch(
            "SELECT t.tx_id, t.status, t.agent_id, t.created_at, t.updated_at,"
            " (SELECT coalesce(json_agg(json_build_object('action', o.action, 'provider',"
            " o.provider, 'operation', o.operation, 'state', o.state) ORDER BY o.position),"
            " '[]') FROM operations o WHERE o.tenant = t.tenant AND o.tx_id = t.tx_id)"
            " AS operations"
            f" FROM transactions t WHERE {where}"
            f" ORDER BY t.created_at DESC, t.tx_id DESC LIMIT {where.param(limit)}",
            *where.args,
        )
        return rows

    async def attention(self) -> asyncpg.Record:
        """What waits on a person or on a provider, for the console's counts: open reviews
        and unknown legs (forward or undo), how many and since when the oldest."""
        row: asyncpg.Record = await self.conn.fetchrow(ATTENTION, self.tenant)
        return row

    async def review(self, review_id: str) -> asyncpg.Record | None:
        """A review with its operation, whose evidence is the review's whole trail."""
        row: asyncpg.Record | None = await self.conn.fetchrow(
            f"SELECT {_REVIEW}, r.leg, r.attempt, r.resolved_at, r.resolution, r.note,"
            " r.actor, o.operation, o.provider, o.evidence"
            " FROM reviews r LEFT JOIN operations o"
            " ON o.tenant = r.tenant AND o.tx_id = r.tx_id AND o.action = r.action"
            " WHERE r.tenant = $1 AND r.id = $2",
            self.tenant,
            review_id,
        )
        return row

    async def review_state(self, review_id: str) -> asyncpg.Record | None:
        row: asyncpg.Record | None = await self.conn.fetchrow(
            "SELECT tx_id, state, action, leg, attempt FROM reviews WHERE tenant = $1 AND id = $2",
            self.tenant,
            review_id,
        )
        return row

    async def drift(
        self, *, after: tuple[datetime, str] | None = None, limit: int | None = None
    ) -> list[asyncpg.Record]:
        """The tenant's drift and the drift that belongs to no tenant (which the route
        shows redacted: services.intake.drift), oldest first, after a page's last
        `(detected_at, drift_id)`."""
        page, args = _drift_page(2, after, limit)
        rows: list[asyncpg.Record] = await self.conn.fetch(
            f"{_DRIFT} WHERE (tenant = $1 OR tenant IS NULL) {page}", self.tenant, *args
        )
        return rows

    async def _known(self, tx_id: str) -> bool:
        return bool(
            await self.conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM events WHERE tenant = $1 AND tx_id = $2)",
                self.tenant,
                tx_id,
            )
            or await self.produced_intent(tx_id) is not None
        )


def _drift_page(
    first: int, after: tuple[datetime, str] | None, limit: int | None
) -> tuple[str, tuple[object, ...]]:
    """The page clause of a drift list whose parameters start at `$first`, and its
    arguments; with no position the row comparison is skipped (NULL: from the start)."""
    at, drift, most = (f"${first + i}" for i in range(3))
    clause = (
        f"AND ({at}::timestamptz IS NULL OR (detected_at, drift_id) > ({at}, {drift}))"
        f" ORDER BY detected_at, drift_id LIMIT {most}"
    )
    return clause, (*(after or (None, None)), limit)


async def unowned_drift(
    conn: asyncpg.Connection,
    *,
    after: tuple[datetime, str] | None = None,
    limit: int | None = None,
) -> list[asyncpg.Record]:
    """The deployment admin's view (services.intake.auth.Admin): the drift that belongs to
    no tenant, and none of any tenant's own."""
    page, args = _drift_page(1, after, limit)
    rows: list[asyncpg.Record] = await conn.fetch(f"{_DRIFT} WHERE tenant IS NULL {page}", *args)
    return rows
