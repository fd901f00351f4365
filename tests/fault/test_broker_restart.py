"""The Kafka broker restarted in the middle of a run of 200 transactions."""

import asyncio
from collections import Counter

from recon_client import Recon, transaction
from tests_support_log import read_event_log

from services.stack import Stack

TRANSACTIONS = 200


async def test_broker_restart_mid_run(stack: Stack, recon: Recon, infra: object) -> None:
    broker = infra.require_kafka()  # type: ignore[attr-defined]
    ids = [f"restart-{i}" for i in range(TRANSACTIONS)]
    first, second = ids[: TRANSACTIONS // 2], ids[TRANSACTIONS // 2 :]
    for tx_id in first:
        assert (await recon.submit(transaction(tx_id), retry_unavailable=True)).status_code in (
            200,
            202,
        )
    await asyncio.to_thread(broker.restart)
    for tx_id in second:
        assert (await recon.submit(transaction(tx_id), retry_unavailable=True)).status_code in (
            200,
            202,
        )
    for tx_id in ids:
        tx = await recon.wait_terminal(tx_id, timeout=180)
        assert tx["status"] == "committed", tx
    keys = Counter(e["idempotency_key"] for e in await recon.effects())
    assert len(keys) == 3 * TRANSACTIONS
    assert set(keys.values()) == {1}
    log = await read_event_log(stack)
    assert len(log) == TRANSACTIONS
