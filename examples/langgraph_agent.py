"""A LangGraph graph whose model is scripted (examples/scripted_model.py) and whose tools
call recon through the SDK (examples/recon_tools.py).

- a crash: the tools node dies after the charge's submission; the graph resumes from its
  checkpoint, replays the same tool call, so the same tx_id: recon answers it as a repeat;
- a re-planned charge (new tx_id, same order id) is refused `duplicate_intent`, reported to
  the model as done by the first transaction;
- the delete waits for approval: `wait()` returns `awaiting_approval` and the graph stops at
  an `interrupt()` until a person, having approved in recon, resumes it with
  `Command(resume="approved")`.

Run: `build_graph(recon, run_id).ainvoke({...}, {"configurable": {"thread_id": run_id}})`;
tests/examples/test_langgraph_agent.py drives it against the real stack.
"""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt
from recon_sdk import AsyncRecon

from examples import recon_tools
from examples.scripted_model import SCRIPT, ToolCall

Tool = Callable[..., Awaitable[dict[str, Any]]]
TOOLS: dict[str, Tool] = {
    "charge_order": recon_tools.charge_order,
    "delete_record": recon_tools.delete_record,
}


class AgentState(TypedDict, total=False):
    turn: int
    call: dict[str, Any] | None
    # The tool results, in order (what a chat model would see as tool messages).
    results: Annotated[list[dict[str, Any]], operator.add]
    waiting: dict[str, Any] | None
    answer: str


def build_graph(
    recon: AsyncRecon,
    run_id: str,
    checkpointer: BaseCheckpointSaver[Any],
    *,
    crash_after: frozenset[str] = frozenset(),
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """`crash_after`: tool call ids after whose submission this process dies (the fault a
    test injects in the first process only, as a real crash happens once)."""

    def model(state: AgentState) -> dict[str, Any]:
        turn = state.get("turn", 0)
        planned = SCRIPT[turn]
        if isinstance(planned, ToolCall):
            call = {"id": planned.call_id, "name": planned.name, "args": planned.args}
            return {"turn": turn + 1, "call": call}
        return {"turn": turn + 1, "call": None, "answer": planned}

    async def tools(state: AgentState) -> dict[str, Any]:
        call = state["call"]
        assert call is not None
        tool = TOOLS[call["name"]]
        result = await tool(
            recon, run_id, call["id"], call["args"], crash=call["id"] in crash_after
        )
        waiting = result if result.get("needs_person") else None
        return {"call": None, "results": [result], "waiting": waiting}

    async def human(state: AgentState) -> dict[str, Any]:
        waiting = state["waiting"]
        assert waiting is not None
        # The graph stops here (checkpointed) until a person resumes it; on resume the node
        # runs again from the top and `interrupt` returns the person's decision.
        decision = interrupt({"tx_id": waiting["tx_id"], "transaction": waiting["transaction"]})
        if decision != "approved":
            return {"waiting": None, "results": [{**waiting, "status": "declined"}]}
        settled = await recon.wait(waiting["tx_id"], until=recon_tools.TERMINAL, timeout=90)
        return {"waiting": None, "results": [{"tx_id": settled.tx_id, "status": settled.status}]}

    graph = StateGraph(AgentState)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_node("human", human)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", lambda s: "tools" if s.get("call") else END)
    graph.add_conditional_edges("tools", lambda s: "human" if s.get("waiting") else "model")
    graph.add_edge("human", "model")
    return graph.compile(checkpointer=checkpointer)
