"""kill -9 of the reconciler between claiming a review request in Postgres and sending
RequestReview to Kafka: the claim expires, the next reconciler asks again, and the
operation still reaches manual review instead of staying `unknown` forever."""

import asyncio
import time

import asyncpg
from support.pull_support import FAST_RECONCILER, strand_charge
from support.recon_client import Recon, op
from support.topic_records import read_topic

from events.topics import Topics
from services.crash_points import CRASH_ENV, CRASH_EXIT_CODE
from services.devtools.stack import Stack


async def test_a_reconciler_killed_after_claiming_a_review_still_gets_the_operation_reviewed(
    stack: Stack, recon: Recon
) -> None:
    stack.stop("reconciler")
    await strand_charge(stack, recon, "crash-review", lookups_unavailable=True)

    # Spend the budget, then die right after marking the review requested, before sending.
    stack.extra_env.update(
        {
            **FAST_RECONCILER,
            "RECON_RECONCILE_REVIEW_RETRY_S": "2",
            CRASH_ENV: "reconciler.after_review_mark",
        }
    )
    process = stack.start("reconciler")
    deadline = time.monotonic() + 60
    while process.poll() is None:
        assert time.monotonic() < deadline, "the reconciler never reached the crash point"
        await asyncio.sleep(0.1)
    assert process.returncode == CRASH_EXIT_CODE, stack.log_tail("reconciler")
    stack.processes.pop("reconciler")

    # The crash left the mark set and sent nothing.
    tx = (await recon.get("crash-review")).json()
    key = op(tx, "charge")["op_key"]
    conn = await asyncpg.connect(stack.database_url)
    try:
        marked = await conn.fetchval(
            "SELECT review_requested_at FROM reconciler_leases WHERE op_key = $1", key
        )
    finally:
        await conn.close()
    assert marked is not None
    commands = await read_topic(stack.kafka_bootstrap, Topics(stack.topic_prefix).commands)
    assert not [c for c in commands if c["type"] == "RequestReview"]
    # The reconciler's unavailable lookups are evidence: the leg is `unknown` by the call's
    # own answer (the decider's timeout), and nothing else answers it.
    assert op(tx, "charge")["state"] == "unknown"

    # A reconciler started again (no crash point) asks once the claim has expired.
    del stack.extra_env[CRASH_ENV]
    stack.start("reconciler")
    tx = await recon.wait_terminal("crash-review", timeout=40)
    assert tx["status"] == "manual_review"
    assert op(tx, "charge")["state"] == "manual_review"
    events = await recon.events("crash-review")
    reviews = [e for e in events if e["type"] == "OperationNeedsReview"]
    assert len(reviews) == 1 and reviews[0]["data"]["reason"] == "lookup_budget_exhausted"
