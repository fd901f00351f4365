"""Dispatchers and saga orchestrators in one group each; a third member joins and leaves
again and again while transactions run. Every rebalance revokes partitions under batches
in flight: no process may exit, and every transaction must still settle, each effect once."""

import asyncio
import time

from aiokafka.admin import AIOKafkaAdminClient
from compensation_support import failing_third_step
from recon_client import Recon, effects_for, op, transaction

from services.stack import Stack

CHURN_CYCLES = 4


async def test_rebalances_mid_run_stop_no_dispatcher_or_saga(stack: Stack, recon: Recon) -> None:
    stack.start("dispatcher", instance="-2")
    stack.start("saga", instance="-2")
    await stack.wait_ready()
    # Slow provider calls keep dispatch batches in flight when partitions are revoked, so
    # commits land after revocations: the moment that used to end the process.
    await recon.arm("inventory.reserve", "delay", times=1000, delay_ms=300)
    await recon.arm("payments.refund", "delay", times=1000, delay_ms=300)
    committed = [f"churn-ok-{i}" for i in range(16)]
    compensated = [f"churn-undo-{i}" for i in range(8)]
    bodies = [transaction(t) for t in committed] + [failing_third_step(t) for t in compensated]
    submissions = asyncio.gather(*(recon.submit(b, retry_unavailable=True) for b in bodies))

    groups = [f"{stack.topic_prefix}recon-dispatcher", f"{stack.topic_prefix}recon-saga"]
    admin = AIOKafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
    await admin.start()
    try:
        for cycle in range(CHURN_CYCLES):
            stack.start("dispatcher", instance="-3")
            stack.start("saga", instance="-3")
            await _wait_members(admin, groups, 3)
            _assert_running(stack)
            # Leave both ways: a clean leave (SIGTERM) and a crash (the group notices later).
            if cycle % 2 == 0:
                stack.stop("dispatcher-3")
                stack.stop("saga-3")
            else:
                stack.kill("dispatcher-3")
                stack.kill("saga-3")
                del stack.processes["dispatcher-3"], stack.processes["saga-3"]
            await _wait_members(admin, groups, 2)
            _assert_running(stack)
    finally:
        await admin.close()

    assert all(a.status_code == 202 for a in await submissions)
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


def _assert_running(stack: Stack) -> None:
    for name in ("dispatcher", "dispatcher-2", "saga", "saga-2"):
        code = stack.processes[name].poll()
        assert code is None, f"{name} exited with {code}:\n{stack.log_tail(name)}"


async def _wait_members(admin: AIOKafkaAdminClient, groups: list[str], members: int) -> None:
    """Until every group is stable with exactly `members` members (a rebalance completed)."""
    deadline = time.monotonic() + 60
    seen: list[tuple[str, int]] = []
    while time.monotonic() < deadline:
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
