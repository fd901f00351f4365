"""What the webhook ingress (services.intake.webhooks) reads and writes: the delivery ids
a provider already had handled (`webhook_deliveries`, scoped by provider, not by tenant) and
the operation an effect belongs to. A webhook names no tenant: the effect's idempotency key
does, so that lookup is the one read of the intake that crosses tenants, and the tenant it
finds is the operation's own.
"""

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from reconcilers.webhook_intake import MatchedOperation


@dataclass(frozen=True)
class Deliveries:
    """One provider's handled deliveries, kept for the dedupe horizon."""

    conn: asyncpg.Connection
    provider: str

    async def seen(self, delivery_id: str, since: datetime) -> bool:
        found = await self.conn.fetchval(
            "SELECT 1 FROM webhook_deliveries"
            " WHERE provider = $1 AND delivery_id = $2 AND received_at > $3",
            self.provider,
            delivery_id,
            since,
        )
        return found is not None

    async def remember(self, delivery_id: str, at: datetime) -> None:
        # A row older than the horizon (not purged yet) starts a new window.
        await self.conn.execute(
            "INSERT INTO webhook_deliveries (provider, delivery_id, received_at)"
            " VALUES ($1, $2, $3) ON CONFLICT (provider, delivery_id)"
            " DO UPDATE SET received_at = EXCLUDED.received_at",
            self.provider,
            delivery_id,
            at,
        )


async def purge_deliveries(conn: asyncpg.Connection, before: datetime) -> str:
    """Every provider's deliveries older than `before`: by age alone, so a provider that
    went quiet does not keep its rows forever. Returns Postgres's command tag."""
    tag: str = await conn.execute("DELETE FROM webhook_deliveries WHERE received_at < $1", before)
    return tag


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
