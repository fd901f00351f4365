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
    # Kill once the deciders are busy: some transactions committed, most not.
    while not await _any_committed(recon, ids[:20]):
        await asyncio.sleep(0.1)
    stack.kill("decider")
    answers = await submissions
    assert all(a.status_code == 202 for a in answers)
    for tx_id in ids:
        tx = await recon.wait_terminal(tx_id, timeout=120)
        assert tx["status"] == "committed", tx
    # The survivor took over every partition, the killed one's included.
    assert "took partition" in stack.log_tail("decider", 10_000)
    taken = {
        line.split("took partition ")[1].split()[0]
        for line in stack.log_tail("decider-2", 10_000).splitlines()
        if "took partition" in line
    }
    assert taken == {"0", "1", "2", "3"}
    log = await read_event_log(stack)
    assert set(log) == {("demo", tx_id) for tx_id in ids}
    for key, envelopes in log.items():
        assert [e.seq for e in envelopes] == list(range(1, len(envelopes) + 1)), key
        assert len({e.event_id for e in envelopes}) == len(envelopes), key


async def _any_committed(recon: Recon, ids: list[str]) -> bool:
    answers = await asyncio.gather(*(recon.get(tx_id) for tx_id in ids))
    return any(a.status_code == 200 and a.json()["status"] == "committed" for a in answers)
