"""A dispatch order held by a kill switch that is released by now (`ks_1`, engaged nowhere
in the tests that use it): the row the gate writes when a begin is stopped, with the order's
real envelope, so a resume of it runs the real plan; and its claim by a partition's owner."""

import asyncpg

from services.dispatcher import gatekeeper
from services.dispatcher.dispatch_order import DispatchOrder
from services.governance import store


async def hold_order(conn: asyncpg.Connection, order: DispatchOrder) -> None:
    dispatch = order.dispatch
    await store.hold(
        conn,
        tenant=order.envelope.tenant,
        tx_id=order.envelope.tx_id,
        action=dispatch.action,
        op_key=dispatch.op_key,
        attempt=dispatch.attempt,
        agent_id="agent-7",
        provider=dispatch.provider,
        operation=dispatch.operation,
        partition=order.partition,
        envelope=order.envelope.model_dump_json(),
        switch_ids=("ks_1",),
    )


async def claim_held(conn: asyncpg.Connection, claimer: str, partition: int = 0) -> store.Held:
    """The one released hold, claimed by `claimer`'s gate loop, as it claims them while it
    owns `partition`."""
    (claimed,) = await store.claim_released(
        conn,
        gatekeeper.HOLD_LEASE_S,
        gatekeeper.RESUME_BATCH,
        claimer=claimer,
        partitions=[partition],
    )
    return claimed
