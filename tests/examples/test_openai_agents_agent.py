"""examples/openai_agents_agent.py against the real stack (Kafka, Postgres, every recon process
and the sandbox provider): the scripted model's crash, re-plan, approval and lost response
end with one charge and one delete at the provider, counted in the sandbox's own call log."""

from __future__ import annotations

import pytest
from agents import Runner, SQLiteSession
from agents.exceptions import UserError
from recon_sdk import AsyncRecon, stable_tx_id
from support.example_checks import arm_lost_charge, assert_one_effect_each, seed_record
from support.recon_client import Recon

from examples.openai_agents_agent import AgentContext, build_agent, tool_outputs
from examples.recon_tools import AgentCrashed, approve_as_operator
from examples.scripted_model import CRASH_AFTER, ORDER, RECORD
from services.devtools.stack import Stack

RUN_ID = "run-openai-agents-1"
ASK = f"Charge {ORDER} and delete {RECORD}."


async def test_openai_agent_survives_crash_replan_approval_and_lost_response(
    stack: Stack, recon: Recon
) -> None:
    await seed_record(recon, RECORD)
    await arm_lost_charge(recon)
    agent = build_agent()
    session = SQLiteSession(RUN_ID)  # the run's memory, which outlives the crashed process
    async with (
        AsyncRecon(stack.intake_url, api_key="demo-key") as client,
        AsyncRecon(stack.intake_url, api_key="ops-key") as operator,
    ):
        crashing = AgentContext(client, RUN_ID, crash_after=frozenset({CRASH_AFTER}))
        # The SDK wraps a tool's exception in its UserError; the cause is the crash.
        with pytest.raises(UserError) as crashed:
            await Runner.run(agent, ASK, context=crashing, session=session)
        assert isinstance(crashed.value.__cause__, AgentCrashed), crashed.value

        # The restarted process: same run id and session; the unanswered charge is replayed.
        paused = await Runner.run(agent, ASK, context=AgentContext(client, RUN_ID), session=session)
        (question,) = paused.interruptions
        assert question.name == "wait_for_person", question

        # The person approves in recon (an operator key), then in the run, and resumes it.
        outputs = tool_outputs(paused.to_input_list())
        await approve_as_operator(operator, outputs["call_delete"]["transaction"])
        state = paused.to_state()
        state.approve(question)
        done = await Runner.run(agent, state, context=AgentContext(client, RUN_ID))

    charge_tx = stable_tx_id(RUN_ID, CRASH_AFTER)
    assert outputs[CRASH_AFTER]["tx_id"] == charge_tx, outputs
    assert outputs[CRASH_AFTER]["status"] == "committed", outputs
    replanned = outputs["call_charge_again"]
    assert replanned["status"] == "duplicate", replanned
    assert replanned["duplicate_of"]["tx_id"] == charge_tx, replanned
    assert replanned["duplicate_of"]["natural_key"] == ORDER, replanned
    assert outputs["call_delete"]["status"] == "awaiting_approval", outputs
    assert done.final_output.startswith(f"Charged {ORDER} once"), done.final_output
    await assert_one_effect_each(recon, charge_tx)
