"""Where governance state lives while it is in force: Postgres (services/governance/
schema.sql), read by the intake's gate and by every dispatcher; every change is also a
record on recon.governance (events.governance), produced by whoever makes the change.

Quota reservations are exact under any interleaving of dispatchers: each one runs in a
Postgres transaction that first takes an advisory lock on (tenant, agent, operation), so the
claims it counts cannot change until it has inserted its own or refused; the decision itself
is the pure `gate.quota_refusal`.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from events.canonical import fingerprint
from events.policy import PolicyDocument, Quota
from services.governance.gate import Claim, Switch, reserve
from services.unnest_params import unnest_params

# How long a quota claim is kept at least, whatever its windows: a dispatch re-delivered
# within it is recognised by its key and not counted twice (reserve_quota).
CLAIM_DEDUPE_S = 86400.0


# --- policies ---------------------------------------------------------------------------


def policy_digest(document: PolicyDocument) -> str:
    body = document.model_dump(mode="json")
    if not body["tasks"]:
        del body["tasks"]  # a document from before tasks existed keeps its digest
    return fingerprint(body)


@dataclass(frozen=True)
class Installed:
    document: PolicyDocument
    digest: str
    actor: str
    set_at: str


async def policy_of(conn: asyncpg.Connection, tenant: str) -> Installed | None:
    row = await conn.fetchrow(
        "SELECT document, digest, actor, set_at FROM governance_policies WHERE tenant = $1",
        tenant,
    )
    if row is None:
        return None
    return Installed(
        PolicyDocument.model_validate_json(row["document"]),
        row["digest"],
        row["actor"],
        row["set_at"].isoformat(),
    )


async def current_version(conn: asyncpg.Connection, tenant: str) -> int:
    version = await conn.fetchval(
        "SELECT version FROM governance_policies WHERE tenant = $1", tenant
    )
    return int(version or 0)


async def replace_policy(
    conn: asyncpg.Connection,
    tenant: str,
    document: PolicyDocument,
    actor: str,
    *,
    newer_only: bool = False,
) -> bool:
    """Install `document` if it is the next version (the current one + 1), or with
    `newer_only` (the start-up file) if it is any later version; False if another change
    got there first. Call it inside a transaction that also produces the change."""
    if newer_only:
        sql = (
            "INSERT INTO governance_policies (tenant, version, digest, document, actor)"
            " VALUES ($1, $2, $3, $4::jsonb, $5) ON CONFLICT (tenant) DO UPDATE SET"
            " version = EXCLUDED.version, digest = EXCLUDED.digest, document ="
            " EXCLUDED.document, actor = EXCLUDED.actor, set_at = clock_timestamp()"
            " WHERE governance_policies.version < EXCLUDED.version RETURNING 1"
        )
    elif document.version == 1:
        sql = (
            "INSERT INTO governance_policies (tenant, version, digest, document, actor)"
            " VALUES ($1, $2, $3, $4::jsonb, $5) ON CONFLICT (tenant) DO NOTHING RETURNING 1"
        )
    else:
        sql = (
            "UPDATE governance_policies SET version = $2, digest = $3, document = $4::jsonb,"
            " actor = $5, set_at = clock_timestamp() WHERE tenant = $1 AND version = $2 - 1"
            " RETURNING 1"
        )
    written = await conn.fetchval(
        sql,
        tenant,
        document.version,
        policy_digest(document),
        document.model_dump_json(),
        actor,
    )
    return written is not None


@dataclass(frozen=True)
class InForce:
    """What a dispatcher's gate keeps of the governance state, read by one statement
    (`in_force`): every tenant's policy, the engaged switches, and whether any dispatch is
    held, by any dispatcher (only then is claiming the released ones worth a statement)."""

    policies: dict[str, tuple[str, PolicyDocument]]  # tenant -> (digest, document)
    switches: dict[str, list[Switch]]
    held: bool


async def in_force(
    conn: asyncpg.Connection, known: dict[str, tuple[str, PolicyDocument]]
) -> InForce:
    """One round trip for the gate's view: the documents whose digest differs from the one
    `known` holds are read and parsed, the others kept (a digest names its document)."""
    row = await conn.fetchrow(
        "SELECT (SELECT coalesce(json_agg(json_build_object('tenant', p.tenant, 'digest',"
        "  p.digest, 'document', CASE WHEN k.digest IS DISTINCT FROM p.digest"
        "  THEN p.document::text END)), '[]') FROM governance_policies p"
        "  LEFT JOIN unnest($1::text[], $2::text[]) AS k(tenant, digest) USING (tenant))"
        " AS policies,"
        " (SELECT coalesce(json_agg(json_build_object('tenant', tenant, 'switch_id', switch_id,"
        "  'scope', scope)), '[]') FROM kill_switches WHERE released_at IS NULL) AS switches,"
        " EXISTS (SELECT 1 FROM held_dispatches) AS held",
        list(known),
        [digest for digest, _ in known.values()],
    )
    assert row is not None
    policies: dict[str, tuple[str, PolicyDocument]] = {}
    for p in json.loads(row["policies"]):
        tenant, digest, document = p["tenant"], p["digest"], p["document"]
        if document is None:
            policies[tenant] = known[tenant]
        else:
            policies[tenant] = (digest, PolicyDocument.model_validate_json(document))
    switches: dict[str, list[Switch]] = {}
    for k in json.loads(row["switches"]):
        switches.setdefault(k["tenant"], []).append(Switch(k["switch_id"], **k["scope"]))
    return InForce(policies, switches, bool(row["held"]))


# --- kill switches ----------------------------------------------------------------------


async def engage(
    conn: asyncpg.Connection,
    switch_id: str,
    tenant: str,
    scope: dict[str, str],
    reason: str,
    actor: str,
) -> str:
    """Insert the switch; its engagement time (the database's clock)."""
    at = await conn.fetchval(
        "INSERT INTO kill_switches (switch_id, tenant, scope, reason, engaged_by)"
        " VALUES ($1, $2, $3::jsonb, $4, $5) RETURNING engaged_at",
        switch_id,
        tenant,
        json.dumps(scope),
        reason,
        actor,
    )
    return str(at.isoformat())


async def release(conn: asyncpg.Connection, tenant: str, switch_id: str, actor: str) -> str | None:
    """Release an engaged switch; its release time, or None if none such is engaged."""
    at = await conn.fetchval(
        "UPDATE kill_switches SET released_at = clock_timestamp(), released_by = $3"
        " WHERE tenant = $1 AND switch_id = $2 AND released_at IS NULL RETURNING released_at",
        tenant,
        switch_id,
        actor,
    )
    return None if at is None else str(at.isoformat())


async def switch_exists(conn: asyncpg.Connection, tenant: str, switch_id: str) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT 1 FROM kill_switches WHERE tenant = $1 AND switch_id = $2",
            tenant,
            switch_id,
        )
    )


async def list_switches(conn: asyncpg.Connection, tenant: str) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT k.*, (SELECT count(*) FROM held_dispatches h WHERE h.tenant = k.tenant"
        " AND k.switch_id = ANY(h.switch_ids)) AS held"
        " FROM kill_switches k WHERE tenant = $1 ORDER BY engaged_at DESC, switch_id",
        tenant,
    )
    return [
        {
            "id": r["switch_id"],
            "scope": json.loads(r["scope"]),
            "reason": r["reason"],
            "state": "engaged" if r["released_at"] is None else "released",
            "engaged_by": r["engaged_by"],
            "engaged_at": r["engaged_at"].isoformat(),
            "released_by": r["released_by"],
            "released_at": r["released_at"].isoformat() if r["released_at"] else None,
            "held": r["held"],
        }
        for r in rows
    ]


# --- quotas and breakers ------------------------------------------------------------------


async def reserve_quota(
    conn: asyncpg.Connection,
    *,
    tenant: str,
    agent_id: str,
    operation: str,
    op_key: str,
    amount: int,
    quotas: tuple[Quota, ...],
) -> Quota | None:
    """Count this dispatch against its quotas, or return the quota it would exceed (and
    trip the breaker). A key already counted passes without being counted again."""
    async with conn.transaction():
        # The lock is a statement of its own: a statement reads the snapshot taken when it
        # starts, so the ledger is read by the next one, after the previous holder's commit.
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            # Two names hashing alike only serialise more than needed, never less.
            f"{tenant}/{agent_id}/{operation}",
        )
        longest = max(q.window_s for q in quotas)
        # What the ledger holds, in one round trip: this key's claim, the breaker, the
        # database's clock, and the claims of the longest window.
        ledger = await conn.fetchrow(
            "WITH t AS (SELECT clock_timestamp() AS now)"
            " SELECT EXISTS (SELECT 1 FROM quota_claims WHERE tenant = $1 AND op_key = $2)"
            "  AS already,"
            " (SELECT quota FROM quota_breakers"
            "  WHERE tenant = $1 AND agent_id = $3 AND operation = $4) AS breaker,"
            " extract(epoch FROM t.now)::float8 AS now,"
            " (SELECT coalesce(json_agg(json_build_array(c.op_key, c.amount,"
            "   extract(epoch FROM c.claimed_at)::float8)), '[]') FROM quota_claims c"
            "  WHERE c.tenant = $1 AND c.agent_id = $3 AND c.operation = $4"
            "  AND c.claimed_at > t.now - make_interval(secs => $5)) AS claims"
            " FROM t",
            tenant,
            op_key,
            agent_id,
            operation,
            float(longest),
        )
        assert ledger is not None
        now = float(ledger["now"])
        breaker = ledger["breaker"]
        decided = reserve(
            already_counted=bool(ledger["already"]),
            breaker=None if breaker is None else Quota.model_validate_json(breaker),
            quotas=quotas,
            claims=[Claim(key, int(n), float(at)) for key, n, at in json.loads(ledger["claims"])],
            amount=amount,
            now=now,
        )
        if decided.outcome == "already":
            return None
        if decided.outcome == "refused":
            assert decided.quota is not None
            await conn.execute(
                "INSERT INTO quota_breakers (tenant, agent_id, operation, op_key, quota)"
                " VALUES ($1, $2, $3, $4, $5::jsonb) ON CONFLICT (tenant, agent_id, operation)"
                " DO UPDATE SET refused = quota_breakers.refused + 1",
                tenant,
                agent_id,
                operation,
                op_key,
                decided.quota.model_dump_json(),
            )
            return decided.quota
        # A claim older than every window of its quotas counts for none of them: deleted
        # here, under this triple's lock, so the table holds windows, not history. Kept at
        # least CLAIM_DEDUPE_S so a late re-delivery of the same key is still not counted.
        # One statement with the new claim's insert (it is younger than what it deletes).
        await conn.execute(
            "WITH gone AS (DELETE FROM quota_claims WHERE tenant = $1 AND agent_id = $2"
            " AND operation = $3 AND claimed_at <= to_timestamp($7))"
            " INSERT INTO quota_claims (tenant, agent_id, operation, op_key, amount, claimed_at)"
            " VALUES ($1, $2, $3, $4, $5, to_timestamp($6))",
            tenant,
            agent_id,
            operation,
            op_key,
            amount,
            now,
            now - max(longest, CLAIM_DEDUPE_S),
        )
        return None


async def quota_usage(
    conn: asyncpg.Connection, tenant: str, policy: PolicyDocument
) -> list[dict[str, Any]]:
    """Each quota of the policy with what its window holds now, and its breaker."""
    breakers = {
        (r["agent_id"], r["operation"]): r
        for r in await conn.fetch("SELECT * FROM quota_breakers WHERE tenant = $1", tenant)
    }
    out: list[dict[str, Any]] = []
    for agent_id, agent in sorted(policy.agents.items()):
        for quota in agent.quotas:
            used = await conn.fetchrow(
                "SELECT count(*) AS n, coalesce(sum(amount), 0) AS amount FROM quota_claims"
                " WHERE tenant = $1 AND agent_id = $2 AND operation = $3"
                " AND claimed_at > clock_timestamp() - make_interval(secs => $4)",
                tenant,
                agent_id,
                quota.operation,
                float(quota.window_s),
            )
            tripped = breakers.get((agent_id, quota.operation))
            out.append(
                {
                    "agent_id": agent_id,
                    **quota.model_dump(),
                    "used_count": used["n"],
                    "used_amount": int(used["amount"]),
                    "breaker": {
                        "state": "open" if tripped else "closed",
                        "tripped_at": tripped["tripped_at"].isoformat() if tripped else None,
                        "tripped_by": tripped["op_key"] if tripped else None,
                        "refused": tripped["refused"] if tripped else 0,
                    },
                }
            )
    return out


async def reset_breaker(
    conn: asyncpg.Connection, tenant: str, agent_id: str, operation: str
) -> str | None:
    """Close a tripped breaker; when it had tripped, or None if it was closed."""
    at = await conn.fetchval(
        "DELETE FROM quota_breakers WHERE tenant = $1 AND agent_id = $2 AND operation = $3"
        " RETURNING tripped_at",
        tenant,
        agent_id,
        operation,
    )
    return None if at is None else str(at.isoformat())


# --- held dispatches ----------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    tenant: str
    op_key: str
    attempt: int
    partition: int
    envelope: str
    # The dispatcher whose claim returned it (claim_released): only that one forgets it.
    claimer: str


async def hold(
    conn: asyncpg.Connection,
    *,
    tenant: str,
    tx_id: str,
    action: str,
    op_key: str,
    attempt: int,
    agent_id: str,
    provider: str,
    operation: str,
    partition: int,
    envelope: str,
    switch_ids: tuple[str, ...],
) -> None:
    await conn.execute(
        "INSERT INTO held_dispatches (tenant, op_key, attempt, tx_id, action, agent_id,"
        " provider, operation, partition, envelope, switch_ids)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        " ON CONFLICT (tenant, op_key, attempt) DO UPDATE SET switch_ids = EXCLUDED.switch_ids,"
        " claimed_until = NULL, claimed_by = NULL",
        tenant,
        op_key,
        attempt,
        tx_id,
        action,
        agent_id,
        provider,
        operation,
        partition,
        envelope,
        list(switch_ids),
    )


def switch_matches(agent_id: str, provider: str, operation: str) -> str:
    """SQL: an engaged switch `k` whose scope covers the call (the SQL form of
    `gate.blocking`, for statements that must check and write in one snapshot)."""
    return (
        "k.released_at IS NULL"
        f" AND coalesce(k.scope->>'agent_id', {agent_id}) = {agent_id}"
        f" AND coalesce(k.scope->>'provider', {provider}) = {provider}"
        f" AND coalesce(k.scope->>'operation', {operation}) = {operation}"
    )


async def switches_holding(
    conn: asyncpg.Connection, tenant: str, tx_id: str, provider: str, operation: str
) -> list[str]:
    """The engaged switches of `tenant` that stop a send of `operation` at `provider` for
    the transaction's agent (its projected row): for a caller that sends outside the
    dispatcher's gate, as a replaying provider's lookup does."""
    rows = await conn.fetch(
        "SELECT k.switch_id FROM kill_switches k JOIN transactions t ON t.tenant = k.tenant"
        " WHERE t.tenant = $1 AND t.tx_id = $2 AND "
        + switch_matches("t.agent_id", "$3::text", "$4::text")
        + " ORDER BY k.switch_id",
        tenant,
        tx_id,
        provider,
        operation,
    )
    return [r["switch_id"] for r in rows]


async def claim_released(
    conn: asyncpg.Connection,
    lease_s: float,
    limit: int = 200,
    *,
    claimer: str,
    partitions: Sequence[int],
) -> list[Held]:
    """Claim (for `lease_s`, as `claimer`) held dispatches of `partitions` (the claimer's
    decider owns them) that no engaged switch of their tenant matches any more. A claimer
    that dies lets its lease lapse, and another claims them again.

    Only the partition's owner resumes a hold, because only it knows the transaction's
    state: a resumer elsewhere could not tell that a person failed the transaction after a
    crashed resumer had begun the held leg, and would call it (the simulator's seed 851,
    there within one process: services.decider.dispatch_host `_over`)."""
    rows = await conn.fetch(
        "WITH free AS ("
        "  SELECT h.tenant, h.op_key, h.attempt FROM held_dispatches h"
        "  WHERE (h.claimed_until IS NULL OR h.claimed_until < clock_timestamp())"
        "  AND h.partition = ANY($4::int[])"
        "  AND NOT EXISTS (SELECT 1 FROM kill_switches k WHERE k.tenant = h.tenant"
        f"   AND {switch_matches('h.agent_id', 'h.provider', 'h.operation')})"
        "  ORDER BY h.held_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
        " UPDATE held_dispatches h SET claimed_until = clock_timestamp()"
        "  + make_interval(secs => $1), claimed_by = $3 FROM free"
        " WHERE (h.tenant, h.op_key, h.attempt) = (free.tenant, free.op_key, free.attempt)"
        " RETURNING h.tenant, h.op_key, h.attempt, h.partition, h.envelope",
        lease_s,
        limit,
        claimer,
        list(partitions),
    )
    return [
        Held(r["tenant"], r["op_key"], r["attempt"], r["partition"], r["envelope"], claimer)
        for r in rows
    ]


async def held_on(conn: asyncpg.Connection, partition: int) -> set[tuple[str, str, int]]:
    """The held dispatches of one partition (tenant, key, attempt), claimed or not: a decider
    taking the partition leaves them to the resume loop (services.decider.dispatch_host)."""
    rows = await conn.fetch(
        "SELECT tenant, op_key, attempt FROM held_dispatches WHERE partition = $1", partition
    )
    return {(r["tenant"], r["op_key"], r["attempt"]) for r in rows}


async def renew_claims(conn: asyncpg.Connection, held: list[Held], lease_s: float) -> None:
    """Extend the lease of held dispatches still being resumed, so no other dispatcher claims
    one while its call runs: only a claim still its own (a hold written again is free)."""
    await conn.execute(
        "UPDATE held_dispatches h SET claimed_until = clock_timestamp()"
        " + make_interval(secs => $1)"
        " FROM unnest($2::text[], $3::text[], $4::int[], $5::text[])"
        "  AS w(tenant, op_key, attempt, claimer)"
        " WHERE (h.tenant, h.op_key, h.attempt) = (w.tenant, w.op_key, w.attempt)"
        " AND h.claimed_by = w.claimer",
        lease_s,
        [h.tenant for h in held],
        [h.op_key for h in held],
        [h.attempt for h in held],
        [h.claimer for h in held],
    )


async def release_claims(conn: asyncpg.Connection, held: list[Held]) -> None:
    """Clear the claims of holds their claimer will not resume (its decider lost their
    partitions before their calls: services.decider.dispatch_host `_resume`), only while
    each claim is still that claimer's, so the partitions' owners claim them at once rather
    than after the lease (HOLD_LEASE_S). A hold whose call began keeps its claim."""
    await conn.execute(
        "UPDATE held_dispatches h SET claimed_until = NULL, claimed_by = NULL"
        " FROM unnest($1::text[], $2::text[], $3::int[], $4::text[])"
        "  AS w(tenant, op_key, attempt, claimer)"
        " WHERE (h.tenant, h.op_key, h.attempt) = (w.tenant, w.op_key, w.attempt)"
        " AND h.claimed_by = w.claimer",
        [h.tenant for h in held],
        [h.op_key for h in held],
        [h.attempt for h in held],
        [h.claimer for h in held],
    )


async def forget_held(conn: asyncpg.Connection, held: Held) -> None:
    """Delete a hold its resume settled, only while the claim is still `held.claimer`'s: a
    hold written again meanwhile (its claim cleared), and perhaps claimed by another
    dispatcher since, is not this resume's to forget (migration 0010)."""
    await conn.execute(
        "DELETE FROM held_dispatches WHERE tenant = $1 AND op_key = $2 AND attempt = $3"
        " AND claimed_by = $4",
        held.tenant,
        held.op_key,
        held.attempt,
        held.claimer,
    )


@dataclass(frozen=True)
class Authority:
    """What an intent acts under: its agent, the policy version its submission was checked
    under, and the task it named (None: the agent's own grants only)."""

    agent_id: str
    policy_version: int = 0
    task_id: str | None = None


async def agents_of(
    conn: asyncpg.Connection, wanted: list[tuple[str, str]]
) -> dict[tuple[str, str], Authority]:
    """The authority of each (tenant, tx_id), from the intake's intent rows (written before
    the submission was produced, so present for every dispatch)."""
    rows = await conn.fetch(
        "SELECT i.tenant, i.tx_id, i.agent_id, i.policy_version, i.task_id FROM intents i"
        f" JOIN {unnest_params('$1::text[]', '$2::text[]')} AS w(tenant, tx_id)"
        " USING (tenant, tx_id)",
        [t for t, _ in wanted],
        [x for _, x in wanted],
    )
    return {
        (r["tenant"], r["tx_id"]): Authority(r["agent_id"], r["policy_version"], r["task_id"])
        for r in rows
    }
