"""A revocation lets go of the leases of calls that answered but whose answers were not
committed yet (services/dispatcher/held_leases.py, `let_go`), through a real rebalance: the
partitions' next owner takes those calls over (their legs are still `dispatched`) and its
claim is taken at once, instead of waiting out the old owner's lease (62 s here: twice the
30 s provider timeout, plus 2).

The window is held open by the task pause point DISPATCHER_ANSWER_NOT_REPORTED, armed in the
first decider only: each call's task stops there after its provider answered (off the
wire, its lease kept while the partition is owned) and before it reports, while the process
goes on heartbeating, so a second decider joining revokes its partitions then. The
sandbox drops the reserves' webhooks, the other way their effects would be answered.

Without the revocation's let_go the joiner's take-over waits ("another caller is making
this call") and finds nothing within the test's 30 s.

Real parts: Kafka, Postgres, two decider processes and the sandbox provider."""

import asyncio
import time
from pathlib import Path

from support.crash_support import start_paused_at, wait_for_log
from support.recon_client import op, transaction
from support.stack_fixtures import StackWith
from test_call_in_flight_across_rebalance import WAITED, _one_on

from events.topics import PARTITIONS
from services.crash_points import DISPATCHER_ANSWER_NOT_REPORTED
from services.devtools.consumer_groups import wait_spread

TAKEN_OVER = "reserve attempt 1: succeeded via lookup"


async def test_a_revocation_lets_the_next_owner_claim_a_call_whose_answer_was_not_committed(
    stack_with: StackWith, tmp_path: Path
) -> None:
    async with stack_with(RECON_PROVIDER_TIMEOUT_S="30", RECON_LOG_LEVEL="INFO") as (
        stack,
        recon,
    ):
        stack.stop("reconciler")  # its lookups would only add noise
        marker = tmp_path / "answers-held"
        start_paused_at(stack, "decider", DISPATCHER_ANSWER_NOT_REPORTED, marker)
        # One transaction per partition: whichever partitions the joiner is given, it
        # takes over a reserve the first decider answered and has not reported.
        txs = [_one_on(p, "let-go") for p in range(PARTITIONS)]
        # The reserves' webhooks would answer their legs as well: only the calls' reports
        # (held) may, so the legs stay `dispatched` for the take-over.
        await recon.arm("inventory.reserve", "webhook_drop", times=len(txs))
        accepted = await asyncio.gather(*(recon.submit(transaction(t)) for t in txs))
        assert all(a.status_code == 202 for a in accepted), [a.text for a in accepted]
        await _until_lines(marker, len(txs))

        stack.start("decider", instance="-2")
        await wait_spread(stack.kafka_bootstrap, [f"{stack.topic_prefix}recon-decider"], 2)
        # The joiner's take-over claims each moved reserve at once and finds its effect.
        started = time.monotonic()
        await wait_for_log(stack, "decider-2", TAKEN_OVER, timeout=30)
        took = time.monotonic() - started
        joiner = stack.log_tail("decider-2", 100_000)
        assert WAITED not in joiner, "the take-over waited for a lease the revocation kept"

        marker.unlink()  # the first decider's held answers go on (duplicates by id)
        for tx_id in txs:
            tx = await recon.wait_terminal(tx_id, timeout=120)
            assert tx["status"] == "committed", tx
            reserve = op(tx, "reserve")["op_key"]
            await recon.assert_applied_once(reserve)
    assert took < 10, f"the joiner took {took:.1f} s to take a reserve over"


async def _until_lines(marker: Path, count: int, timeout: float = 60) -> None:
    """Until `count` calls hold at the task pause point (one line each)."""
    deadline = time.monotonic() + timeout
    while True:
        held = await asyncio.to_thread(_lines, marker)
        if held >= count:
            return
        assert time.monotonic() < deadline, f"{held} calls held, not {count}"
        await asyncio.sleep(0.1)


def _lines(marker: Path) -> int:
    return marker.read_text().count("\n") if marker.exists() else 0
