"""The durable "about to call" record (`calls_begun`, services/migrations).

A dispatcher writes one row per (tenant, op_key, leg, attempt) right before it calls the
provider, after every gate and precondition. Three questions are answered by it, exactly:

- Is this dispatch a redelivery? Only if a row exists: some dispatcher (a dead owner, a
  resume that lost its lease, this one before a rewind) may have made the call. Without a
  row no call was ever made under this attempt, whatever the offset says, so a dispatch read
  again after a rebalance, or a held dispatch claimed again, is a first send when nobody
  got as far as the provider, and a looked-up-first redelivery when somebody did. Asked by
  `was_begun` when a lookup or a precondition comes before the begin, and otherwise by
  `begin` itself (`existed`), which then writes nothing new.
- Does a kill switch stop this call? The row is written by the statement that checks the
  engaged switches (`begin`), so a switch whose 201 was answered before the statement ran
  is seen: from the 201 on, no new call for its scope is begun. A call begun before it is
  in flight, and settles as usual.
- Does an abort stop this call? A step's forward call is not begun once the transaction's
  abort is recorded on its intent row (services.intake.abort_record, written before the
  abort's 202) unless a call of that leg was begun before (any attempt): then the call
  stands and the decider's too-late rule applies. Checked by the same statement, so an
  abort recorded before it ran is seen, and one recorded after finds the row. Undo legs and
  notifications are never stopped: an abort must still be able to undo, and to tell.

The row is written before the call, never after: a crash between the two leaves a row for
a call that may not have been made (a lookup settles it), never a call without a row.
"""

import asyncpg

# What `begin` answers is the call plan's (pure) type: services.dispatcher.call_plan.
from services.dispatcher.call_plan import Begun
from services.governance.store import switch_matches


async def was_begun(
    conn: asyncpg.Connection, tenant: str, op_key: str, leg: str, attempt: int
) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT 1 FROM calls_begun"
            " WHERE tenant = $1 AND op_key = $2 AND leg = $3 AND attempt = $4",
            tenant,
            op_key,
            leg,
            attempt,
        )
    )


async def begin(
    conn: asyncpg.Connection,
    *,
    tenant: str,
    tx_id: str,
    op_key: str,
    leg: str,
    attempt: int,
    agent_id: str,
    provider: str,
    operation: str,
) -> Begun:
    """Record the call unless an engaged switch covers it or an abort stops it, and say
    whether its row existed before, in one statement (one snapshot: a switch cannot be
    engaged, nor an abort recorded, nor the row written, between the check and the write as
    this statement sees it), so a first send needs no `was_begun` round trip before it."""
    row = await conn.fetchrow(
        "WITH blockers AS ("
        "  SELECT k.switch_id FROM kill_switches k WHERE k.tenant = $1"
        f"  AND {switch_matches('$5::text', '$6::text', '$7::text')}),"
        # A forward leg of a step (not a notification) of an aborted transaction, never
        # begun under any attempt: one primary-key probe of the intent row per call.
        " aborted AS ("
        "  SELECT 1 FROM intents i WHERE i.tenant = $1 AND i.tx_id = $8"
        "  AND i.abort_requested_at IS NOT NULL AND $3 = 'forward'"
        "  AND i.operations @> jsonb_build_array("
        "   jsonb_build_object('op_key', $2::text, 'kind', 'step'))"
        "  AND NOT EXISTS (SELECT 1 FROM calls_begun c"
        "   WHERE c.tenant = $1 AND c.op_key = $2 AND c.leg = $3)),"
        " written AS ("
        "  INSERT INTO calls_begun (tenant, op_key, leg, attempt)"
        "  SELECT $1, $2, $3, $4"
        "  WHERE NOT EXISTS (SELECT 1 FROM blockers) AND NOT EXISTS (SELECT 1 FROM aborted)"
        "  ON CONFLICT DO NOTHING RETURNING 1)"
        " SELECT coalesce((SELECT array_agg(switch_id ORDER BY switch_id) FROM blockers),"
        "  '{}'::text[]) AS switches, EXISTS (SELECT 1 FROM written) AS written,"
        "  EXISTS (SELECT 1 FROM aborted) AS aborted,"
        # The snapshot's: the row `written` inserts is not visible to it.
        "  EXISTS (SELECT 1 FROM calls_begun c WHERE c.tenant = $1 AND c.op_key = $2"
        "   AND c.leg = $3 AND c.attempt = $4) AS existed",
        tenant,
        op_key,
        leg,
        attempt,
        agent_id,
        provider,
        operation,
        tx_id,
    )
    assert row is not None
    return Begun(
        tuple(row["switches"]), bool(row["written"]), bool(row["aborted"]), bool(row["existed"])
    )
