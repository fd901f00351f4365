"""The Kafka broker restarted in the middle of a run of 200 transactions."""

import asyncio
from collections import Counter, defaultdict

from conftest import Infra
from support.recon_client import Recon, transaction
from support.tests_support_log import read_event_log

from services.devtools.stack import Stack

TRANSACTIONS = 200


async def test_broker_restart_mid_run(stack: Stack, recon: Recon, infra: Infra) -> None:
    broker = infra.require_kafka()
    ids = [f"restart-{i}" for i in range(TRANSACTIONS)]
    gate = asyncio.Semaphore(2)

    async def submit(tx_id: str) -> int:
        async with gate:
            response = await recon.submit(transaction(tx_id), retry_unavailable=True)
            await asyncio.sleep(0.03)  # paced, so the run spans the restart
            return response.status_code

    submitting = asyncio.gather(*(submit(tx_id) for tx_id in ids))
    # Restart once the run is well under way: some transactions committed, most not.
    committed = 0
    while committed < 10:
        await asyncio.sleep(0.2)
        states = await asyncio.gather(*(recon.get(tx_id) for tx_id in ids[:60]))
        committed = sum(
            1 for s in states if s.status_code == 200 and s.json()["status"] == "committed"
        )
    assert not submitting.done(), "the run finished before the broker could be restarted"
    await asyncio.to_thread(broker.restart)

    assert set(await submitting) <= {200, 202}
    for tx_id in ids:
        tx = await recon.wait_terminal(tx_id, timeout=180)
        assert tx["status"] == "committed", tx
    # One stable key per operation and one effect per key...
    keys = Counter(e["idempotency_key"] for e in await recon.effects())
    assert len(keys) == 3 * TRANSACTIONS
    assert set(keys.values()) == {1}
    # ...and nothing sent twice: one apply per key reached the provider (a dispatch re-read
    # after the restart looked its key up instead).
    applies: dict[str, list[str]] = defaultdict(list)
    for call in await recon.calls():
        if call["kind"] == "apply":
            applies[call["idempotency_key"]].append(call["outcome"])
    assert set(applies) == set(keys)
    assert {key: outcomes for key, outcomes in applies.items() if outcomes != ["applied"]} == {}
    log = await read_event_log(stack)
    assert len(log) == TRANSACTIONS
