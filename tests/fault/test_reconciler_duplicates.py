"""Duplicated scheduler ticks and two reconciler processes: every lookup of a stuck
operation leg is done and reported once, within the budget, and review is asked once."""

import asyncio
import time
from collections import defaultdict

from support.pull_support import wait_calls_arrived
from support.recon_client import Recon, op, transaction
from support.topic_records import read_topic

from events.topics import Topics
from services.config import ReconcilerSettings, Settings
from services.devtools.stack import Stack
from services.pull_reconciler.runtime import open_reconciler

BUDGET = 5
FAST = ReconcilerSettings(
    interval_s=0.2, after_s=1, budget=BUDGET, backoff_s=0.2, backoff_max_s=0.5
)
TXS = ("dup-1", "dup-2", "dup-3")


async def test_double_ticks_and_two_processes_do_not_duplicate_lookups(
    stack: Stack, recon: Recon
) -> None:
    env = {
        "RECON_RECONCILE_INTERVAL_S": str(FAST.interval_s),
        "RECON_RECONCILE_AFTER_S": str(FAST.after_s),
        "RECON_RECONCILE_BUDGET": str(FAST.budget),
        "RECON_RECONCILE_BACKOFF_S": str(FAST.backoff_s),
        "RECON_RECONCILE_BACKOFF_MAX_S": str(FAST.backoff_max_s),
    }
    stack.stop("reconciler")
    stack.extra_env.update(env)

    # Three charges stranded: held by the provider far beyond the 2 s provider timeout (the
    # decider's call answers `unknown`), no webhooks, and lookups that never answer (armed
    # first: the decider's own lookups after a timeout prove nothing either), so each leg
    # spends its whole budget.
    await recon.arm("payments.charge", "webhook_drop", times=100)
    await recon.arm("payments.charge", "lookup_unavailable", times=10000)
    await recon.arm("payments.charge", "delay", times=len(TXS), delay_ms=60_000)
    for tx_id in TXS:
        assert (await recon.submit(transaction(tx_id, receipt=False))).status_code == 202
    # Generous: under two test workers a dispatcher has needed over 30 s to reach them.
    deadline = time.monotonic() + 90
    while True:
        states = [op((await recon.get(t)).json(), "charge")["state"] for t in TXS]
        if all(s in ("dispatched", "unknown") for s in states):
            break
        assert time.monotonic() < deadline, states
        await asyncio.sleep(0.05)
    await wait_calls_arrived(recon, "payments.charge")

    # Two reconciler processes, plus this process firing every tick twice at once.
    stack.start("reconciler")
    stack.start("reconciler", instance="-2")
    settings = Settings(
        kafka_bootstrap=stack.kafka_bootstrap,
        database_url=stack.database_url,
        topics=Topics(stack.topic_prefix),
        environment="dev",
        providers={"sandbox": stack.sandbox_url},
        reconciler=FAST,
    )
    in_process = 0
    async with open_reconciler(settings) as reconciler:
        deadline = time.monotonic() + 60
        while True:
            reports = await asyncio.gather(reconciler.tick(), reconciler.tick())
            in_process += sum(len(r.looked_up) for r in reports)
            txs = [(await recon.get(t)).json() for t in TXS]
            if all(tx["status"] == "manual_review" for tx in txs):
                break
            assert time.monotonic() < deadline, [tx["status"] for tx in txs]
            await asyncio.sleep(0.1)
    # Barrier instead of a pause: once both processes have exited (each finishing the tick
    # it was in, its observations acknowledged), no late tick can add anything.
    stack.stop("reconciler")
    stack.stop("reconciler-2")

    topics = Topics(stack.topic_prefix)
    observations = [
        o
        for o in await read_topic(stack.kafka_bootstrap, topics.observations)
        if str(o["message_id"]).startswith("reconcile:")
    ]
    ids = [o["message_id"] for o in observations]
    assert len(ids) == len(set(ids)), "an observation was reported twice"
    lookups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for o in observations:
        _, key, attempt, n = o["message_id"].split(":")
        assert (key, int(attempt)) == (o["op_key"], o["attempt"])
        lookups[(key, int(attempt))].append(int(n))
    charges = {op(tx, "charge")["op_key"] for tx in txs}
    assert {key for key, _ in lookups} == charges
    for numbers in lookups.values():
        assert sorted(numbers) == list(range(1, BUDGET + 1))  # each n once, none past budget

    commands = await read_topic(stack.kafka_bootstrap, topics.commands)
    reviews = [c for c in commands if c["type"] == "RequestReview"]
    assert sorted(c["message_id"] for c in reviews) == sorted(
        f"reconcile:{key}:1:review" for key in charges
    )
    for tx in txs:
        charge = op(tx, "charge")
        assert charge["state"] == "manual_review"
        assert (
            len([e for e in charge["evidence"] if e["observation_id"].startswith("reconcile:")])
            == BUDGET
        )
    # Not a guarantee of the design, only of this test's reach: the in-process ticks did
    # compete for the work rather than watch the processes do all of it.
    print(f"in-process lookups: {in_process} of {BUDGET * len(TXS)}")
