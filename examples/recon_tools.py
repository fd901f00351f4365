"""The tools both example agents give their model, each a call of the recon SDK.

What makes them safe to hand to a model that crashes and re-plans:
- the tx_id is derived from the run and the tool call (`stable_tx_id`), never invented, so
  the same tool call replayed after a crash is the same transaction (recon answers it as a
  repeat, nothing is sent twice);
- the charge carries the order id as its `natural_key`, so a re-planned charge (a new tool
  call, hence a new tx_id) for the same order is refused `duplicate_intent`, naming the
  transaction that holds the order: the tool reports it instead of failing;
- the tools wait with `wait()`, which returns on an outcome or on `awaiting_approval`: a lost
  provider response is settled by recon (a lookup at the provider), not by the model
  resubmitting, and a step that needs a person comes back as such, for the framework's own
  human-in-the-loop to handle.
"""

from __future__ import annotations

import asyncio
from typing import Any

from recon_sdk import TERMINAL, AsyncRecon, Conflict, TransactionRequest, ops, stable_tx_id

AGENT_ID = "agent-7"
__all__ = ["TERMINAL", "AgentCrashed", "approve_as_operator", "charge_order", "delete_record"]


class AgentCrashed(RuntimeError):
    """The scripted crash: the agent process dies after its submission reached recon and
    before it saw the answer (the moment a re-planning agent would otherwise resubmit)."""


def charge_request(tx_id: str, order_id: str, amount: int, customer: str) -> TransactionRequest:
    charge = ops.charge(amount, "usd", customer, natural_key=order_id)
    return ops.transaction(tx_id, AGENT_ID, [charge])


def delete_request(tx_id: str, record: str) -> TransactionRequest:
    wipe = ops.step("wipe", "records.delete", {"resource": record})
    return ops.transaction(tx_id, AGENT_ID, [wipe])


async def submit_and_wait(
    recon: AsyncRecon, tx: TransactionRequest, *, crash: bool = False, timeout: float = 90
) -> dict[str, Any]:
    """The tool result the model sees: the outcome, a duplicate's holder, or that a person
    must act. `crash`: die right after the submission (the scripted fault)."""
    while True:
        try:
            await recon.submit(tx)
            break
        except Conflict as refused:
            if refused.code == "duplicate_intent":
                # Another tx_id already owns this order: report it, do not charge again.
                return {
                    "tx_id": tx.tx_id,
                    "status": "duplicate",
                    "duplicate_of": refused.duplicate_of,
                }
            if not refused.retry_safe:  # intent_pending: the holder is not acknowledged yet
                raise
            await asyncio.sleep(refused.retry_after or 0.5)
    if crash:
        raise AgentCrashed(f"crashed after submitting {tx.tx_id}")
    settled = await recon.wait(tx.tx_id, timeout=timeout)
    return {
        "tx_id": tx.tx_id,
        "status": settled.status,
        "needs_person": settled.needs_person,
        "transaction": tx.body(),
    }


async def charge_order(
    recon: AsyncRecon, run_id: str, call_id: str, args: dict[str, Any], *, crash: bool = False
) -> dict[str, Any]:
    tx = charge_request(stable_tx_id(run_id, call_id), **args)
    return await submit_and_wait(recon, tx, crash=crash)


async def delete_record(
    recon: AsyncRecon, run_id: str, call_id: str, args: dict[str, Any], *, crash: bool = False
) -> dict[str, Any]:
    tx = delete_request(stable_tx_id(run_id, call_id), **args)
    return await submit_and_wait(recon, tx, crash=crash)


async def approve_as_operator(operator: AsyncRecon, transaction: dict[str, Any]) -> None:
    """What the person does in recon's console (with an operator key, never the agent's):
    approve exactly what the provider previews for each step waiting for approval."""
    preview = await operator.preview(transaction)
    for step in transaction["steps"]:
        await operator.approve(transaction["tx_id"], step["action"], preview["digest"])
