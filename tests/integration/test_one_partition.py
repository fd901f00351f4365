"""A deployment laid out on one partition per topic (RECON_KAFKA_PARTITIONS=1: one decider
has work, and every partition's Kafka transactions become one stream, docs/scaling.md
"Partitions") runs the same transactions as the default four: the README transaction
commits with its webhooks ingested, a declined charge is compensated, every call is applied
once; and a process started with another count refuses to start, naming both."""

import asyncio
import time
from typing import Any

from support.recon_client import op, transaction
from support.stack_fixtures import StackWith
from support.topic_records import partition_counts

from events.topics import Topics
from services.kafka_setup import topic_configs


async def test_one_partition_runs_the_readme_and_a_compensation_and_refuses_another_count(
    stack_with: StackWith,
) -> None:
    async with stack_with(RECON_KAFKA_PARTITIONS="1") as (stack, recon):
        names = sorted(topic_configs(Topics(stack.topic_prefix)))
        assert await partition_counts(stack.kafka_bootstrap, names) == dict.fromkeys(names, 1)

        assert (await recon.submit(transaction("one-1"))).status_code == 202
        assert (await recon.submit(transaction("one-2", customer="cus_decline"))).status_code == 202
        committed = await recon.wait_terminal("one-1")
        assert committed["status"] == "committed", committed
        compensated = await recon.wait_terminal("one-2")
        assert compensated["status"] == "compensated", compensated
        for tx in (committed, compensated):
            for operation in tx["operations"]:
                if operation["state"] in ("confirmed", "compensated"):
                    await recon.assert_applied_once(operation["op_key"])
        assert op(committed, "receipt")["state"] == "confirmed", committed
        # The sandbox's webhooks reached the decider through the one partition too.
        deadline = time.monotonic() + 30
        while _webhooked(await recon.events("one-1")) != {"reserve", "charge", "receipt"}:
            assert time.monotonic() < deadline, await recon.events("one-1")
            await asyncio.sleep(0.2)

        # The same log, a process told the default count: it stops at start, saying why.
        stack.stop("saga")
        stack.extra_env.pop("RECON_KAFKA_PARTITIONS")
        saga = stack.start("saga")
        deadline = time.monotonic() + 60
        while saga.poll() is None:
            assert time.monotonic() < deadline, stack.log_tail("saga")
            await asyncio.sleep(0.2)
        assert saga.returncode != 0
        said = stack.log_tail("saga", 80)
        assert "RECON_KAFKA_PARTITIONS is 4 but existing topics differ" in said, said
        assert f"{Topics(stack.topic_prefix).events} has 1" in said, said


def _webhooked(events: list[dict[str, Any]]) -> set[str]:
    """The actions a provider's webhook was recorded as evidence for."""
    return {
        e["data"]["action"]
        for e in events
        if (e["data"].get("evidence") or {}).get("source") == "webhook"
    }
