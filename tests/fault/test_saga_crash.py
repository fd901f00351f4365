"""kill -9 of the saga orchestrator after its commands were acknowledged and before its offset
was committed: the restarted orchestrator issues them again, and nothing is undone twice."""

from pathlib import Path

from support.compensation_support import compensation_op_key, failing_third_step
from support.crash_support import start_paused_at, wait_paused
from support.recon_client import Recon, op
from support.topic_records import read_topic

from events.topics import Topics
from services.crash_points import SAGA_AFTER_COMMANDS_ACKED
from services.devtools.stack import Stack


async def test_saga_killed_between_its_commands_and_its_offset_resumes_and_undoes_nothing_twice(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    marker = tmp_path / "paused"
    start_paused_at(stack, "saga", SAGA_AFTER_COMMANDS_ACKED, marker)
    assert (await recon.submit(failing_third_step("saga-crash-1"))).status_code == 202
    # Held after Kafka acknowledged the plan command, before the event's offset is committed.
    await wait_paused(stack, "saga", marker)
    stack.kill("saga")
    stack.start("saga")

    tx = await recon.wait_terminal("saga-crash-1", timeout=90)
    assert tx["status"] == "compensated", tx
    # The window was really hit: the restarted orchestrator read the event again and issued
    # the same command a second time.
    commands = await read_topic(stack.kafka_bootstrap, Topics(stack.topic_prefix).commands)
    plans = [c["message_id"] for c in commands if c["type"] == "PlanCompensation"]
    assert plans == ["saga:plan:demo:saga-crash-1"] * 2, plans
    # The decider recognised it: one plan, each undo dispatched once and applied once at the
    # provider, and nothing ignored along the way.
    events = await recon.events("saga-crash-1")
    types = [e["type"] for e in events]
    assert types.count("CompensationPlanned") == 1
    assert "CommandIgnored" not in types, events
    undos = [
        e["data"]["action"]
        for e in events
        if e["type"] == "OperationDispatched" and e["data"]["leg"] == "compensation"
    ]
    assert undos == ["charge", "reserve"]
    for action in ("charge", "reserve"):
        await recon.assert_applied_once(compensation_op_key(tx, action))
        await recon.assert_applied_once(op(tx, action)["op_key"])
