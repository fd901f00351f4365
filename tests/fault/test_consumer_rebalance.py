"""Deciders (each calling the providers of what it dispatches) and saga orchestrators in one
group each; a third member joins and leaves
again and again while transactions run. Every rebalance revokes partitions under batches
in flight: no process may exit, and every transaction must still settle, each effect once."""

import asyncio
import time
from typing import Any

import httpx
from aiokafka.admin import AIOKafkaAdminClient
from support.compensation_support import failing_third_step
from support.recon_client import Recon, effects_for, op, transaction

from services.devtools.stack import Stack

CHURN_CYCLES = 4


async def test_rebalances_mid_run_stop_no_decider_or_saga(stack: Stack, recon: Recon) -> None:
    stack.start("decider", instance="-2")
    stack.start("saga", instance="-2")
    await stack.wait_ready()
    # Provider calls slower than the decider's provider timeout keep calls in flight
    # (a timeout, then lookups) across rebalances, so commits land after revocations: the
    # moment that used to end the process.
    await recon.arm("inventory.reserve", "delay", times=1000, delay_ms=2500)
    await recon.arm("payments.refund", "delay", times=1000, delay_ms=300)
    committed: list[str] = []
    compensated: list[str] = []
    submissions: list[asyncio.Task[httpx.Response]] = []

    groups = [f"{stack.topic_prefix}recon-decider", f"{stack.topic_prefix}recon-saga"]
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
    await admin.start()
    try:
        for cycle in range(CHURN_CYCLES):
            # New work each cycle, so every rebalance finds batches in flight.
            for i in range(4):
                committed.append(f"churn-ok-{cycle}-{i}")
                submissions.append(asyncio.create_task(_submit(recon, transaction(committed[-1]))))
            for i in range(2):
                compensated.append(f"churn-undo-{cycle}-{i}")
                body = failing_third_step(compensated[-1])
                submissions.append(asyncio.create_task(_submit(recon, body)))
            stack.start("decider", instance="-3")
            stack.start("saga", instance="-3")
            await _wait_members(stack, admin, groups, 3)
            _assert_running(stack)
            # Leave both ways: a clean leave (SIGTERM) and a crash (the group notices later).
            if cycle % 2 == 0:
                stack.stop("decider-3")
                stack.stop("saga-3")
            else:
                stack.kill("decider-3")
                stack.kill("saga-3")
                del stack.processes["decider-3"], stack.processes["saga-3"]
            await _wait_members(stack, admin, groups, 2)
            _assert_running(stack)
    finally:
        await admin.close()

    assert all(a.status_code == 202 for a in await asyncio.gather(*submissions))
    effects = await recon.effects()
    for tx_id in committed:
        tx = await recon.wait_terminal(tx_id, timeout=120)
        assert tx["status"] == "committed", tx
        for action in ("reserve", "charge", "receipt"):
            assert len(effects_for(effects, op(tx, action)["op_key"])) <= 1
    for tx_id in compensated:
        tx = await recon.wait_terminal(tx_id, timeout=120)
        assert tx["status"] == "compensated", tx
    effects = await recon.effects()
    for tx_id in committed + compensated:
        tx = (await recon.get(tx_id)).json()
        for operation in tx["operations"]:
            assert len(effects_for(effects, operation["op_key"])) <= 1, operation
    _assert_running(stack)


async def _submit(recon: Recon, body: dict[str, Any]) -> httpx.Response:
    return await recon.submit(body, retry_unavailable=True)


def _assert_running(stack: Stack) -> None:
    for name in ("decider", "decider-2", "saga", "saga-2"):
        code = stack.processes[name].poll()
        assert code is None, f"{name} exited with {code}:\n{stack.log_tail(name)}"


async def _wait_members(
    stack: Stack, admin: AIOKafkaAdminClient, groups: list[str], members: int
) -> None:
    """Until every group is stable with exactly `members` members (a rebalance completed);
    fails at once, naming it, if a process of the groups exits meanwhile."""
    deadline = time.monotonic() + 60
    seen: list[tuple[str, int]] = []
    while time.monotonic() < deadline:
        _assert_running(stack)
        seen = [await _describe(admin, group) for group in groups]
        if all(state == "Stable" and count == members for state, count in seen):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"groups {groups} never reached {members} stable members: {seen}")


async def _describe(admin: AIOKafkaAdminClient, group: str) -> tuple[str, int]:
    # DescribeGroups: groups[i] = (error_code, group, state, protocol_type, protocol,
    # members, ...) in every version aiokafka speaks.
    described = (await admin.describe_consumer_groups([group]))[0].groups[0]
    return str(described[2]), len(described[5])
