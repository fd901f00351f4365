"""The durable record of an abort asked through the API: `intents.abort_requested_at`
(services/migrations), keyed by the caller's tenant and the tx_id. A store, not a route:
its one statement is a rule of its own, and it is bound to the tenant of the route's
TenantStore (services.intake.tenant_store), the authenticated caller's.

Written before the AbortTransaction is produced, so the dispatcher's last gate
(services/dispatcher/calls_begun.py `begin`) sees the abort even while the command is on
its way to the decider: a step whose call no dispatcher has begun by then is never called,
and the decider ends the transaction as aborted (issue 18, item 17). A call already begun
stands; the decider's too-late rule says what the abort then does.

An intake that dies between this row and the produce leaves an abort that was asked and
never answered: a step not begun yet is still stopped (the dispatcher's refusal is the abort
on the log), and the agent's retry, the same command, adds nothing. Only an intent whose
command Kafka acknowledged (`produced`) is marked: an unacknowledged row may still be taken
over by another body, which must not inherit an abort.
"""

from services.intake.tenant_store import TenantStore


async def record_abort(store: TenantStore, tx_id: str) -> None:
    # The first time is kept: a second abort asks nothing new.
    await store.conn.execute(
        "UPDATE intents SET abort_requested_at = clock_timestamp()"
        " WHERE tenant = $1 AND tx_id = $2 AND produced AND abort_requested_at IS NULL",
        store.tenant,
        tx_id,
    )
