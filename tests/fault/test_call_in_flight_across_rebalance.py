"""A second decider joins while the first has provider calls on the wire: the rebalance
moves partitions whose charges the sandbox is still holding (a delay before it commits),
and the new owner's take-over runs while the old owner's call goes on. The old owner's
`calls_begun` lease (services/dispatcher/call_lease.py) makes the take-over wait for that
call before it looks the charge up, so the provider never has two requests of one attempt
at once: each charge is applied by one request, and the take-over's lookup finds it.

Without the lease's wait (a claim taken whoever holds the call), the take-over looks up
while the first request is held, finds nothing, and sends the charge again: the sandbox
logs a second apply received while the first was still being answered.

Real parts: Kafka, Postgres, two decider processes and the sandbox provider."""

import asyncio
import itertools
import time
from datetime import datetime
from typing import Any

import asyncpg
from support.crash_support import wait_for_log
from support.recon_client import op, transaction
from support.stack_fixtures import StackWith

from events.keys import partition_key
from events.topics import PARTITIONS
from services.devtools.consumer_groups import wait_spread
from services.devtools.synthetic_log import partition_of

# Long enough for the second decider to start, join and take its partitions over while the
# first one's charges are held; under the provider timeout, so each call is on the wire
# throughout, never timed out.
HELD_MS = 15_000
WAITED = "another caller is making this call"


async def test_a_take_over_never_sends_a_call_the_old_owner_still_has_on_the_wire(
    stack_with: StackWith,
) -> None:
    async with stack_with(RECON_PROVIDER_TIMEOUT_S="30", RECON_LOG_LEVEL="INFO") as (
        stack,
        recon,
    ):
        stack.stop("reconciler")  # its lookups would not change the count, only add noise
        # One transaction per partition: whichever the joiner is given, it takes over a
        # charge the first decider is making.
        txs = [_one_on(p, "in-flight") for p in range(PARTITIONS)]
        await recon.arm("payments.charge", "delay", times=len(txs), delay_ms=HELD_MS)
        accepted = await asyncio.gather(*(recon.submit(transaction(t)) for t in txs))
        assert all(a.status_code == 202 for a in accepted), [a.text for a in accepted]
        for tx_id in txs:
            await wait_for_log(stack, "decider", f"{tx_id} charge dispatched")
        charges = [op((await recon.get(t)).json(), "charge")["op_key"] for t in txs]
        await _until_calls_held(stack.database_url, charges)

        stack.start("decider", instance="-2")
        await wait_spread(stack.kafka_bootstrap, [f"{stack.topic_prefix}recon-decider"], 2)

        found_by_take_over = 0
        for tx_id in txs:
            tx = await recon.wait_terminal(tx_id, timeout=120)
            assert tx["status"] == "committed", tx
            calls = await recon.calls(op(tx, "charge")["op_key"])
            applies = [c for c in calls if c["kind"] == "apply"]
            _assert_one_on_the_wire_at_a_time(applies)
            # And so one request: a take-over's lookup, after the call, found the effect.
            assert [c["outcome"] for c in applies] == ["applied"], calls
            found_by_take_over += ("lookup", "found") in [(c["kind"], c["outcome"]) for c in calls]
        # Not every charge: a partition the rebalance gave back to the first decider, its
        # answer committed before the retake, is not looked up (CI met it once).
        assert found_by_take_over >= 1
        # Not by luck: the joiner took over a charge while it was still on the wire.
        assert WAITED in stack.log_tail("decider-2", 100_000)


def _one_on(partition: int, prefix: str) -> str:
    ids = (f"{prefix}-{i}" for i in itertools.count())
    return next(t for t in ids if partition_of(partition_key("demo", t)) == partition)


async def _until_calls_held(database_url: str, charges: list[str], timeout: float = 30) -> None:
    """Until every charge is begun and its lease live: on the wire (a reserve's lease stays
    live after its call, so only the charges' rows are counted)."""
    conn = await asyncpg.connect(database_url)
    try:
        deadline = time.monotonic() + timeout
        live = (
            "SELECT count(*) FROM calls_begun"
            " WHERE held_until > clock_timestamp() AND op_key = ANY($1::text[])"
        )
        while (held := await conn.fetchval(live, charges)) < len(charges):
            assert time.monotonic() < deadline, f"{held} charges on the wire, not {len(charges)}"
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


def _assert_one_on_the_wire_at_a_time(applies: list[dict[str, Any]]) -> None:
    """No apply was received while another was still being answered."""
    spans = sorted(
        (datetime.fromisoformat(c["received_at"]), datetime.fromisoformat(c["at"])) for c in applies
    )
    for (_, answered), (received, _) in itertools.pairwise(spans):
        assert received >= answered, f"two requests of one attempt at once: {applies}"
