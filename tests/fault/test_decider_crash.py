"""Two deciders; one is killed with kill -9 in the middle of its work."""

import asyncio

from recon_client import Recon, transaction
from tests_support_log import read_event_log

from services.stack import Stack


async def test_killed_decider_loses_and_duplicates_nothing(stack: Stack, recon: Recon) -> None:
    stack.start("decider", instance="-2")
    await stack.wait_ready()
    ids = [f"two-deciders-{i}" for i in range(60)]
    submissions = asyncio.gather(
        *(recon.submit(transaction(tx_id), retry_unavailable=True) for tx_id in ids)
    )
    await asyncio.sleep(1.0)  # deciders are busy with the first transactions now
    stack.kill("decider")
    answers = await submissions
    assert all(a.status_code == 202 for a in answers)
    for tx_id in ids:
        tx = await recon.wait_terminal(tx_id, timeout=120)
        assert tx["status"] == "committed", tx
    log = await read_event_log(stack)
    assert set(log) == {("demo", tx_id) for tx_id in ids}
    for key, envelopes in log.items():
        assert [e.seq for e in envelopes] == list(range(1, len(envelopes) + 1)), key
        assert len({e.event_id for e in envelopes}) == len(envelopes), key
