"""What the webhook ingress (services.intake.webhooks) reads and writes: the delivery ids
a provider account already had handled (`webhook_deliveries`, scoped by account) and the
operation an effect belongs to. A webhook names no tenant: the effect's idempotency key
does, so that lookup is the one read of the intake that crosses tenants, and the tenant it
finds is the operation's own (which reconcilers.webhook_intake.meaning then holds to the
account that signed the delivery).
"""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from reconcilers.webhook_intake import MatchedOperation
from services.providers.accounts import account_of
from services.unnest_params import unnest_params


@dataclass(frozen=True)
class Asked:
    """One delivery to check: whether `account` handled `delivery_id` since `since`, and
    the operation leg recon made its effect under at `provider` by the first of `keys` it
    knows (no keys: a delivery not read, or not acted on). `account` is the account as
    services.providers.accounts.Account prints it: the provider's name for the shared
    account (the rows written before accounts existed), `tenant/provider` for a tenant's
    own, whose delivery ids are only unique within that account."""

    account: str
    delivery_id: str
    since: datetime
    provider: str
    keys: tuple[str, ...]


async def look_up_all(
    conn: asyncpg.Connection,
    asked: Sequence[Asked],
    own: Collection[tuple[str, str]] = (),
    handled: Mapping[tuple[str, str], datetime] | None = None,
) -> list["Delivery"]:
    """In one statement (DELIVERIES), each delivery's answer, in order, the matched leg
    with the account its calls went to (the configured own accounts `own`, by services.
    providers.accounts' rule); and the deliveries `handled` recorded: (account as
    Deliveries.provider, delivery id) -> when. A row older than the horizon (not purged
    yet) starts a new window. The statement reads what was there before it, so a delivery
    both recorded and asked in it is not `seen`: the caller knows what it records."""
    rows = sorted((handled or {}).items())
    found = await conn.fetch(
        DELIVERIES,
        [a.account for a in asked],
        [a.delivery_id for a in asked],
        [a.since for a in asked],
        [a.provider for a in asked],
        [n for n, a in enumerate(asked, 1) for _ in a.keys],
        [key for a in asked for key in a.keys],
        [account for (account, _), _ in rows],
        [delivery_id for (_, delivery_id), _ in rows],
        [at for _, at in rows],
    )
    by_n = {row["n"]: row for row in found}
    return [
        Delivery(by_n[n]["seen"], _matched(by_n[n], a.provider, own))
        for n, a in enumerate(asked, 1)
    ]


async def purge_deliveries(conn: asyncpg.Connection, before: datetime) -> str:
    """Every provider's deliveries older than `before`: by age alone, so a provider that
    went quiet does not keep its rows forever. Returns Postgres's command tag."""
    tag: str = await conn.execute("DELETE FROM webhook_deliveries WHERE received_at < $1", before)
    return tag


# One statement finds the operation leg an effect belongs to (MATCH), and with the delivery's
# dedupe check and the record of the deliveries handled before it (DELIVERIES) it is the one
# statement of a webhook (issue 24, item 5), shared by the webhooks that reach it at the same
# time (services.intake.delivery_batches).
#
# Every branch is by indexed equality, so it stays an index scan whatever plan Postgres
# picks, the generic plan asyncpg's prepared statements end up with included (issue 7,
# item 17; tests/integration/test_webhook_lookup_plans.py). The LIMIT sits above a sort of
# every match, so no plan can bet on a scan finding one early.
#
# The keys (`keys`: MATCH's $1) are tried in their order, most trusted first
# (reconcilers.webhook_reading.EffectNotice.keys): the match of the earliest key wins, so a
# less trusted key never picks a leg when a more trusted one names another. For one key
# the projected operations come first and the intake's own intent keys after (they cover
# a provider that calls back before the projector has caught up); both name the same leg,
# since a key is derived from the tenant, transaction, provider and action it names
# (events.keys.op_key).
#
# The provider is matched too (`provider`: MATCH's $2): a delivery signed with one
# provider's secret proves what that provider holds, never an effect recon asked of
# another (a sandbox webhook must not confirm a Stripe charge that happens to share the
# key). A compensation goes to its step's provider (events.definition), so the step's
# names it.
def _match(keys: str, provider: str) -> str:
    return f"""
SELECT tenant, tx_id, action, key FROM (
    SELECT o.tenant, o.tx_id, o.action, k.at, k.key, 0 AS source
    FROM operations o CROSS JOIN LATERAL (
        SELECT at, key FROM (VALUES (array_position({keys}, o.op_key), o.op_key),
                                    (array_position({keys}, o.comp_op_key), o.comp_op_key))
               AS named (at, key)
        WHERE at IS NOT NULL ORDER BY at LIMIT 1
    ) k
    WHERE (o.op_key = ANY({keys}) OR o.comp_op_key = ANY({keys})) AND o.provider = {provider}
    UNION ALL
    SELECT k.tenant, k.tx_id, k.action, array_position({keys}, k.key), k.key, 1
    FROM intent_keys k JOIN intents i ON (i.tenant, i.tx_id) = (k.tenant, k.tx_id)
    WHERE k.key = ANY({keys}) AND EXISTS (
        SELECT 1 FROM jsonb_array_elements(i.operations) op
        WHERE op->>'action' = k.action AND op->>'provider' = {provider})
) matched ORDER BY at, source LIMIT 1
"""


MATCH = _match("$1::text[]", "$2")
# For each delivery n of the arrays $1-$4 (account, delivery id, since, provider): whether
# the account had it handled since then, and MATCH of its keys, which $5/$6 list as
# (n, key) pairs in each delivery's order. One statement for many webhooks, as one for one.
# And the deliveries $7-$9 (account, delivery id, when) recorded as handled: in key order,
# so two intakes writing the same delivery at once wait for each other instead of
# deadlocking; a delivery once per statement (ON CONFLICT cannot touch a row twice in one).
# A data-modifying WITH runs whatever the query reads of it, and the query reads the table
# as it was before the statement.
# MATERIALIZED: each delivery's keys are gathered once, not wherever MATCH names them. The
# arrays are read through services.unnest_params, so the statement is planned once per
# connection instead of at every call.
DELIVERIES = f"""
WITH recorded AS (
    INSERT INTO webhook_deliveries (provider, delivery_id, received_at)
    SELECT * FROM {unnest_params("$7::text[]", "$8::text[]", "$9::timestamptz[]")} ORDER BY 1, 2
    ON CONFLICT (provider, delivery_id) DO UPDATE SET received_at = EXCLUDED.received_at
), asked AS MATERIALIZED (
    SELECT a.n, a.account, a.delivery_id, a.since, a.provider,
           ARRAY(SELECT k.key FROM {unnest_params("$5::int[]", "$6::text[]")} WITH ORDINALITY
                           AS k (n, key, at)
                 WHERE k.n = a.n ORDER BY k.at) AS keys
    FROM {unnest_params("$1::text[]", "$2::text[]", "$3::timestamptz[]", "$4::text[]")}
         WITH ORDINALITY
         AS a (account, delivery_id, since, provider, n)
)
SELECT a.n,
       EXISTS (SELECT 1 FROM webhook_deliveries d
               WHERE d.provider = a.account AND d.delivery_id = a.delivery_id
                 AND d.received_at > a.since) AS seen,
       found.tenant, found.tx_id, found.action, found.key
FROM asked a LEFT JOIN LATERAL ({_match("a.keys", "a.provider")}) found ON true
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
    """MATCH alone: the leg `look_up_all` would find for `keys`."""
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
