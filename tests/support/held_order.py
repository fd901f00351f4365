"""A dispatch order held by a kill switch that is released by now (`ks_1`, engaged nowhere
in the tests that use it): the row the gate writes when a begin is stopped, with the order's
real envelope, so a resume of it runs the real plan."""

import asyncpg

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
