"""Postgres restarted while transactions run: the projections catch up, exactly once."""

import asyncio

import asyncpg
from conftest import Infra
from recon_client import Recon, transaction
from tests_support_log import read_event_log

from services.stack import Stack


async def test_postgres_restart_mid_run(stack: Stack, recon: Recon, infra: Infra) -> None:
    postgres = infra.require_postgres()
    ids = [f"pg-restart-{i}" for i in range(40)]
    for tx_id in ids[:20]:
        assert (await recon.submit(transaction(tx_id))).status_code == 202
    await asyncio.to_thread(postgres.restart)
    for tx_id in ids[20:]:
        assert (await recon.submit(transaction(tx_id), retry_unavailable=True)).status_code == 202
    for tx_id in ids:
        tx = await recon.wait_terminal(tx_id, timeout=120)
        assert tx["status"] == "committed", tx
    # The projection holds every event of the log exactly once, in seq order.
    log = await read_event_log(stack)
    conn = await asyncpg.connect(stack.database_url)
    try:
        rows = await conn.fetch("SELECT tx_id, seq, hash FROM events ORDER BY tx_id, seq")
    finally:
        await conn.close()
    projected = {(r["tx_id"], r["seq"], r["hash"]) for r in rows}
    assert len(rows) == len(projected)
    assert projected == {(e.tx_id, e.seq, e.hash) for envelopes in log.values() for e in envelopes}
