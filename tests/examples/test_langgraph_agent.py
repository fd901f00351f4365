"""examples/langgraph_agent.py against the real stack (Kafka, Postgres, every recon process
and the sandbox provider): the scripted model's crash, re-plan, approval and lost response
end with one charge and one delete at the provider, counted in the sandbox's own call log."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from recon_sdk import AsyncRecon, stable_tx_id
from support.example_checks import arm_lost_charge, assert_one_effect_each, seed_record
from support.recon_client import Recon

from examples.langgraph_agent import build_graph
from examples.recon_tools import AgentCrashed, approve_as_operator
from examples.scripted_model import CRASH_AFTER, ORDER, RECORD
from services.devtools.stack import Stack

RUN_ID = "run-langgraph-1"


async def test_langgraph_agent_survives_crash_replan_approval_and_lost_response(
    stack: Stack, recon: Recon
) -> None:
    await seed_record(recon, RECORD)
    await arm_lost_charge(recon)
    config: Any = {"configurable": {"thread_id": RUN_ID}}
    checkpoints = InMemorySaver()
    async with (
        AsyncRecon(stack.intake_url, api_key="demo-key") as agent,
        AsyncRecon(stack.intake_url, api_key="ops-key") as operator,
    ):
        first = build_graph(agent, RUN_ID, checkpoints, crash_after=frozenset({CRASH_AFTER}))
        with pytest.raises(AgentCrashed):
            await first.ainvoke({"turn": 0}, config)

        # The restarted process resumes from the checkpoint: the charge's tool call is
        # replayed under the same id, so the same tx_id, and the run goes on to the delete.
        restarted = build_graph(agent, RUN_ID, checkpoints)
        paused = await restarted.ainvoke(None, config)
        (question,) = paused["__interrupt__"]
        assert paused["results"][-1]["status"] == "awaiting_approval", paused["results"]

        # The person approves in recon (an operator key), then resumes the graph.
        await approve_as_operator(operator, question.value["transaction"])
        done = await restarted.ainvoke(Command(resume="approved"), config)

    charge_tx = stable_tx_id(RUN_ID, CRASH_AFTER)
    charged, replanned, waited, deleted = done["results"]
    assert charged == {**charged, "tx_id": charge_tx, "status": "committed"}, charged
    assert replanned["status"] == "duplicate", replanned
    assert replanned["duplicate_of"]["tx_id"] == charge_tx, replanned
    assert replanned["duplicate_of"]["natural_key"] == ORDER, replanned
    assert waited["tx_id"] == deleted["tx_id"] and deleted["status"] == "committed", done
    assert done["answer"].startswith(f"Charged {ORDER} once")
    await assert_one_effect_each(recon, charge_tx)
