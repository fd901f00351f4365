"""Identity comes from the credential (README, "Roles"): an agent key that names its agents
(RECON_API_KEYS "key=tenant:agent") cannot submit, abort or claim as another agent, and
nothing is recorded for the refusal; an operator who submitted a transaction, whichever
agent it named, may not approve its step (separation of duties on principals)."""

from typing import Any

from support.recon_client import Recon
from support.stack_fixtures import StackWith

BOT = {"Authorization": "Bearer bot-key"}
OPS = {"Authorization": "Bearer ops-key"}


def delete_tx(tx_id: str, agent_id: str, record: str) -> dict[str, Any]:
    return {
        "tx_id": tx_id,
        "agent_id": agent_id,
        "steps": [
            {
                "action": "wipe",
                "provider": "sandbox",
                "operation": "records.delete",
                "payload": {"resource": record},
            }
        ],
    }


async def submit(recon: Recon, body: dict[str, Any], headers: dict[str, str]) -> Any:
    return await recon.http.post(f"{recon.intake_url}/v1/transactions", json=body, headers=headers)


async def test_a_bound_key_speaks_only_for_its_agent_and_an_operator_not_for_its_own_step(
    stack_with: StackWith,
) -> None:
    async with stack_with(RECON_API_KEYS="demo-key=demo,bot-key=demo:agent-7") as (_, recon):
        as_other = await submit(recon, delete_tx("as-other", "agent-granted", "rec-a"), BOT)
        assert as_other.status_code == 403, as_other.text
        assert as_other.json()["error"] == "agent_not_bound"
        unseen = await recon.http.get(f"{recon.intake_url}/v1/transactions/as-other", headers=BOT)
        assert unseen.status_code == 404  # nothing recorded for the refusal
        abort = await recon.http.post(
            f"{recon.intake_url}/v1/transactions/as-other/abort",
            json={"agent_id": "agent-granted"},
            headers=BOT,
        )
        assert (abort.status_code, abort.json()["error"]) == (403, "agent_not_bound")

        # The operator submits as `bot`, then tries to approve its own destructive step.
        body = delete_tx("own-step", "bot", "rec-b")
        accepted = await submit(recon, body, OPS)
        assert accepted.status_code == 202, accepted.text
        await recon.wait_until(
            "own-step",
            lambda t: t["status"] == "awaiting_approval",
            timeout=60,
            failure="the delete did not wait for approval",
        )
        preview = await recon.http.post(f"{recon.intake_url}/v1/previews", json=body, headers=OPS)
        assert preview.status_code == 200, preview.text
        approved = await recon.http.post(
            f"{recon.intake_url}/v1/approvals",
            json={"tx_id": "own-step", "action": "wipe", "digest": preview.json()["digest"]},
            headers=OPS,
        )
        assert approved.status_code == 403, approved.text
        assert approved.json()["error"] == "separation_of_duties"
