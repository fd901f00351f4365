"""An OpenAI Agents SDK agent whose model is scripted (examples/scripted_model.py: no network,
no API key) and whose tools call recon through the SDK (examples/recon_tools.py).

- a crash: `charge_order` dies after its submission; the restarted run (same run id, same
  session) replays the unanswered tool call under its id, so the same tx_id: recon answers it
  as a repeat and nothing is charged twice;
- a re-planned charge (new call id, so new tx_id, same order id) is refused
  `duplicate_intent`, and the tool tells the model which transaction already did it;
- the delete waits for approval: its tool returns `awaiting_approval`, the model then calls
  `wait_for_person`, a tool with `needs_approval=True`, so the run stops with an interruption
  until a person, having approved in recon, approves it in the run state and resumes.

tests/examples/test_openai_agents_agent.py drives it against the real stack.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from agents import Agent, Model, ModelResponse, ModelSettings, function_tool
from agents.items import TResponseStreamEvent
from agents.tool_context import ToolContext
from agents.tracing import set_tracing_disabled
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from recon_sdk import AsyncRecon

from examples import recon_tools
from examples.scripted_model import SCRIPT, ToolCall

# Traces would be exported to OpenAI's servers: none here, the example runs offline.
set_tracing_disabled(True)


@dataclass(frozen=True)
class AgentContext:
    recon: AsyncRecon
    run_id: str
    # Tool call ids after whose submission this process dies (the injected crash).
    crash_after: frozenset[str] = frozenset()


def tool_outputs(items: str | list[Any]) -> dict[str, dict[str, Any]]:
    """The tool results the model has seen so far, by call id."""
    found: dict[str, dict[str, Any]] = {}
    for item in [] if isinstance(items, str) else items:
        raw = item if isinstance(item, dict) else item.model_dump()
        if raw.get("type") == "function_call_output":
            output = raw["output"]
            found[raw["call_id"]] = json.loads(output) if isinstance(output, str) else output
    return found


def next_step(items: str | list[Any]) -> ToolCall | str:
    """Replays SCRIPT against what the run has answered so far: the first tool call without
    a result (after a crash, the same call under the same id), and after a result that needs
    a person, a `wait_for_person` call for it."""
    outputs = tool_outputs(items)
    for planned in SCRIPT:
        if not isinstance(planned, ToolCall):
            return planned
        answer = outputs.get(planned.call_id)
        if answer is None:
            return planned
        waited = f"{planned.call_id}_wait"
        if answer.get("status") == "awaiting_approval" and waited not in outputs:
            return ToolCall(waited, "wait_for_person", {"tx_id": answer["tx_id"]})
    raise AssertionError("the script ended without an answer")


class ScriptedModel(Model):
    """A `Model` that answers with the script's next step instead of calling an LLM."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        step = next_step(input)
        if isinstance(step, ToolCall):
            call = ResponseFunctionToolCall(
                type="function_call",
                call_id=step.call_id,
                name=step.name,
                arguments=json.dumps(step.args),
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text=step, annotations=[])
        message = ResponseOutputMessage(
            id="msg_scripted",
            type="message",
            role="assistant",
            status="completed",
            content=[text],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scripted model does not stream")


# failure_error_function=None: a tool's exception ends the run (a crash), instead of being
# turned into a message for the model, which would re-plan around it.
@function_tool(failure_error_function=None)
async def charge_order(
    ctx: ToolContext[AgentContext], order_id: str, amount: int, customer: str
) -> str:
    """Charge `amount` minor units (usd) to `customer` for the order `order_id`."""
    c = ctx.context
    args = {"order_id": order_id, "amount": amount, "customer": customer}
    crash = ctx.tool_call_id in c.crash_after
    return json.dumps(
        await recon_tools.charge_order(c.recon, c.run_id, ctx.tool_call_id, args, crash=crash)
    )


@function_tool(failure_error_function=None)
async def delete_record(ctx: ToolContext[AgentContext], record: str) -> str:
    """Delete the record `record` (destructive: a person approves it in recon first)."""
    c = ctx.context
    crash = ctx.tool_call_id in c.crash_after
    result = await recon_tools.delete_record(
        c.recon, c.run_id, ctx.tool_call_id, {"record": record}, crash=crash
    )
    return json.dumps(result)


@function_tool(needs_approval=True, failure_error_function=None)
async def wait_for_person(ctx: ToolContext[AgentContext], tx_id: str) -> str:
    """Wait for the outcome of `tx_id` once a person approved its step in recon."""
    settled = await ctx.context.recon.wait(tx_id, until=recon_tools.TERMINAL, timeout=90)
    return json.dumps({"tx_id": settled.tx_id, "status": settled.status})


def build_agent() -> Agent[AgentContext]:
    return Agent[AgentContext](
        name="orders",
        instructions="Charge the order once, then delete the record.",
        model=ScriptedModel(),
        tools=[charge_order, delete_record, wait_for_person],
    )
