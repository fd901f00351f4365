"""What the webhook ingress (services.intake.webhooks) reads and writes: the delivery ids
a provider account already had handled (`webhook_deliveries`, scoped by account) and the
operation an effect belongs to. A webhook names no tenant: the effect's idempotency key
does, so that lookup is the one read of the intake that crosses tenants, and the tenant it
finds is the operation's own (which reconcilers.webhook_intake.meaning then holds to the
account that signed the delivery).
"""

from collections.abc import Collection, Mapping
from dataclasses import dataclass
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

    async def look_up(
        self,
        delivery_id: str,
        since: datetime,
        provider: str,
        keys: tuple[str, ...],
        own: Collection[tuple[str, str]] = (),
    ) -> "Delivery":
        """In one statement (DELIVERY): whether the account handled the delivery since
        `since`, and the operation leg recon made its effect under at `provider` by the
        first of `keys` it knows (no keys: a delivery not read, or not acted on), with the
        account its calls went to (the configured own accounts `own`, by services.
        providers.accounts' rule)."""
        row = await self.conn.fetchrow(
            DELIVERY, list(keys), provider, self.provider, delivery_id, since
        )
        return Delivery(row["seen"], _matched(row, provider, own))


async def remember_deliveries(
    conn: asyncpg.Connection, handled: Mapping[tuple[str, str], datetime]
) -> None:
    """Record deliveries as handled, in one statement: (account as Deliveries.provider,
    delivery id) -> when. A row older than the horizon (not purged yet) starts a new
    window. Written in key order, so two intakes writing the same delivery at once wait
    for each other instead of deadlocking."""
    rows = sorted(handled.items())
    await conn.execute(
        "INSERT INTO webhook_deliveries (provider, delivery_id, received_at)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[])"
        " ORDER BY 1, 2 ON CONFLICT (provider, delivery_id)"
        " DO UPDATE SET received_at = EXCLUDED.received_at",
        [account for (account, _), _ in rows],
        [delivery_id for (_, delivery_id), _ in rows],
        [at for _, at in rows],
    )


async def purge_deliveries(conn: asyncpg.Connection, before: datetime) -> str:
    """Every provider's deliveries older than `before`: by age alone, so a provider that
    went quiet does not keep its rows forever. Returns Postgres's command tag."""
    tag: str = await conn.execute("DELETE FROM webhook_deliveries WHERE received_at < $1", before)
    return tag


# One statement finds the operation leg an effect belongs to (MATCH), and with the delivery's
# dedupe check (DELIVERY) it is the one statement of a webhook before its acknowledgement
# (issue 24, item 5; `remember_deliveries` after it is the second, shared by the webhooks
# handled at the same time: services.intake.delivery_records).
#
# Every branch is by indexed equality, so it stays an index scan whatever plan Postgres
# picks, the generic plan asyncpg's prepared statements end up with included (issue 7,
# item 17; tests/integration/test_webhook_lookup_plans.py). The LIMIT sits above a sort of
# every match, so no plan can bet on a scan finding one early.
#
# The keys ($1) are tried in their order, most trusted first (reconcilers.webhook_reading.
# EffectNotice.keys): the match of the earliest key wins, so a less trusted key never picks
# a leg when a more trusted one names another. For one key the projected operations come
# first and the intake's own intent keys after (they cover a provider that calls back
# before the projector has caught up); both name the same leg, since a key is derived from
# the tenant, transaction, provider and action it names (events.keys.op_key).
#
# The provider is matched too ($2): a delivery signed with one provider's secret proves
# what that provider holds, never an effect recon asked of another (a sandbox webhook must
# not confirm a Stripe charge that happens to share the key). A compensation goes to its
# step's provider (events.definition), so the step's names it.
MATCH = """
SELECT tenant, tx_id, action, key FROM (
    SELECT o.tenant, o.tx_id, o.action, k.at, k.key, 0 AS source
    FROM operations o CROSS JOIN LATERAL (
        SELECT at, key FROM (VALUES (array_position($1::text[], o.op_key), o.op_key),
                                    (array_position($1::text[], o.comp_op_key), o.comp_op_key))
               AS named (at, key)
        WHERE at IS NOT NULL ORDER BY at LIMIT 1
    ) k
    WHERE (o.op_key = ANY($1::text[]) OR o.comp_op_key = ANY($1::text[])) AND o.provider = $2
    UNION ALL
    SELECT k.tenant, k.tx_id, k.action, array_position($1::text[], k.key), k.key, 1
    FROM intent_keys k JOIN intents i ON (i.tenant, i.tx_id) = (k.tenant, k.tx_id)
    WHERE k.key = ANY($1::text[]) AND EXISTS (
        SELECT 1 FROM jsonb_array_elements(i.operations) op
        WHERE op->>'action' = k.action AND op->>'provider' = $2)
) matched ORDER BY at, source LIMIT 1
"""
# Whether the account ($3) had the delivery ($4) handled since $5, and MATCH.
DELIVERY = f"""
WITH found AS ({MATCH})
SELECT EXISTS (SELECT 1 FROM webhook_deliveries
               WHERE provider = $3 AND delivery_id = $4 AND received_at > $5) AS seen,
       found.tenant, found.tx_id, found.action, found.key
FROM (VALUES (1)) AS one (x) LEFT JOIN found ON true
"""


@dataclass(frozen=True)
class Delivery:
    """What the ingress knows of a delivery before acting on it."""

    # Handled within the dedupe horizon already: answered `duplicate`, nothing done.
    seen: bool
    # The operation leg its effect belongs to, with the account its calls went to.
    matched: MatchedOperation | None


async def operation_by_key(
    conn: asyncpg.Connection,
    provider: str,
    keys: tuple[str, ...],
    own: Collection[tuple[str, str]] = (),
) -> MatchedOperation | None:
    """MATCH alone: the leg `look_up` would find for `keys`."""
    return _matched(await conn.fetchrow(MATCH, list(keys), provider), provider, own)


def _matched(
    row: asyncpg.Record | None, provider: str, own: Collection[tuple[str, str]]
) -> MatchedOperation | None:
    if row is None or row["tenant"] is None:
        return None
    return MatchedOperation(
        tenant=row["tenant"],
        tx_id=row["tx_id"],
        action=row["action"],
        op_key=row["key"],
        account=account_of(row["tenant"], provider, own).tenant,
    )
