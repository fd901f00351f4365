"""What the webhook ingress (services.intake.webhooks) reads and writes: the delivery ids
a provider account already had handled (`webhook_deliveries`, scoped by account) and the
operation an effect belongs to. A webhook names no tenant: the effect's idempotency key
does, so that lookup is the one read of the intake that crosses tenants, and the tenant it
finds is the operation's own (which reconcilers.webhook_intake.meaning then holds to the
account that signed the delivery).
"""

from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime

import asyncpg

from reconcilers.webhook_intake import MatchedOperation
from services.providers.accounts import account_of


@dataclass(frozen=True)
class Deliveries:
    """One provider account's handled deliveries, kept for the dedupe horizon. `provider`
    is the account as services.providers.accounts.Account prints it: the provider's name
    for the shared account (the rows written before accounts existed), `tenant/provider`
    for a tenant's own, whose delivery ids are only unique within that account."""

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
# The provider is matched too: a delivery signed with one provider's secret proves what
# that provider holds, never an effect recon asked of another (a sandbox webhook must not
# confirm a Stripe charge that happens to share the key).
OPERATION_BY_KEY = (
    "SELECT tenant, tx_id, action, op_key, comp_op_key FROM operations"
    " WHERE (op_key = ANY($1::text[]) OR comp_op_key = ANY($1::text[])) AND provider = $2"
)
# A compensation goes to its step's provider (events.definition), so the step's names it.
INTENT_BY_KEY = (
    "SELECT k.tenant, k.tx_id, k.action, k.key FROM intent_keys k"
    " JOIN intents i ON (i.tenant, i.tx_id) = (k.tenant, k.tx_id)"
    " WHERE k.key = ANY($1::text[]) AND EXISTS (SELECT 1 FROM"
    " jsonb_array_elements(i.operations) op"
    " WHERE op->>'action' = k.action AND op->>'provider' = $2)"
)


async def operation_by_key(
    conn: asyncpg.Connection,
    provider: str,
    keys: tuple[str, ...],
    own: Collection[tuple[str, str]] = (),
) -> MatchedOperation | None:
    """The operation leg recon made the effect under at `provider`, by either of its keys,
    with the account its calls went to (the configured own accounts `own`, by services.
    providers.accounts' rule). The projected operations come first; the intake's own
    intent keys cover a provider that calls back before the projector has caught up.
    The keys are tried in their order; the first one recon knows wins."""
    for key in keys:
        # Most trusted first (reconcilers.webhook_reading.EffectNotice.keys): one query
        # over all of them could match a less trusted key's leg.
        found = await _by_key(conn, provider, (key,))
        if found is not None:
            return replace(found, account=account_of(found.tenant, provider, own).tenant)
    return None


async def _by_key(
    conn: asyncpg.Connection, provider: str, keys: tuple[str, ...]
) -> MatchedOperation | None:
    if not keys:
        return None
    row = await conn.fetchrow(OPERATION_BY_KEY, list(keys), provider)
    if row is not None:
        key = row["op_key"] if row["op_key"] in keys else row["comp_op_key"]
        return MatchedOperation(
            tenant=row["tenant"], tx_id=row["tx_id"], action=row["action"], op_key=key
        )
    row = await conn.fetchrow(INTENT_BY_KEY, list(keys), provider)
    if row is None:
        return None
    return MatchedOperation(
        tenant=row["tenant"], tx_id=row["tx_id"], action=row["action"], op_key=row["key"]
    )
