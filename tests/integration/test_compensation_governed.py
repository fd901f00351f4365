"""An undo is governed like any call (issue 18, items 1, 2 and 9), through the real intake,
Kafka, decider, dispatcher and sandbox:

- the compensation slot names only the one undo its step's operation declares, with no
  payload of the agent's (a 5,000,000 charge "as the undo" of a reserve, a `records.delete`
  as the undo of a reserve: `422`, nothing recorded, nothing at the provider);
- a payload that does not fit its operation's schema (`"amount": "4999999"`, a float) is
  `422` naming the field, so a quota always reads the amount the provider is sent;
- an undo counts against its operation's quota: a refund past `max_amount` is held for a
  person, never sent.
"""

from typing import Any

from support.governance_support import AGENT, command_tx_ids, put_policy
from support.recon_client import Recon, op

from services.devtools.stack import Stack

POLICY = {
    "version": 1,
    "agents": {
        # Granted only reserves: before the fix its undo slot carried anything.
        "agent-8": {"grants": ["inventory.reserve"]},
        "agent-7": {
            "grants": ["inventory.reserve", "payments.charge"],
            "quotas": [{"operation": "payments.refund", "window_s": 3600, "max_amount": 100}],
        },
    },
}


def reserve_then_decline(
    tx_id: str, agent_id: str, compensation: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A reserve, then a declined charge: the reserve's undo is sent by the saga."""
    return {
        "tx_id": tx_id,
        "agent_id": agent_id,
        "steps": [
            {
                "action": "reserve",
                "provider": "sandbox",
                "operation": "inventory.reserve",
                "payload": {"sku": "sku-1", "qty": 1},
                "compensation": compensation or {"operation": "inventory.release"},
            },
            {
                "action": "declined",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": {"amount": 10, "currency": "usd", "customer": "cus_decline"},
            },
        ],
    }


async def test_an_undo_is_the_declared_one_typed_and_counted_against_quotas(
    stack: Stack, recon: Recon
) -> None:
    assert (await put_policy(recon.http, recon.intake_url, POLICY)).status_code == 200

    refused: list[str] = []

    async def refuse(body: dict[str, Any], error: str, names: str) -> None:
        response = await recon.submit(body)
        assert response.status_code == 422, response.text
        assert response.json()["error"] == error, response.text
        assert names in response.json()["message"], response.text
        refused.append(body["tx_id"])

    # Item 1: a charge sent "as the undo" of a reserve, by an agent granted reserves only.
    big_charge = {
        "operation": "payments.charge",
        "payload": {"amount": 5_000_000, "currency": "usd", "customer": "cus_1"},
    }
    await refuse(
        reserve_then_decline("undo-charge", "agent-8", big_charge),
        "compensation_not_allowed",
        "inventory.release",
    )
    # The right operation with a payload of the agent's choosing (another reservation).
    await refuse(
        reserve_then_decline(
            "undo-payload",
            "agent-8",
            {"operation": "inventory.release", "payload": {"sku": "sku-other", "qty": 99}},
        ),
        "compensation_payload_not_allowed",
        "derived",
    )
    # Item 2: an irreversible delete in the compensation slot, with no policy needed.
    await refuse(
        reserve_then_decline("undo-delete", "agent-7", {"operation": "records.delete"}),
        "compensation_not_allowed",
        "records.delete",
    )
    # Item 9: amounts a quota could not read.
    for tx_id, amount in (("amount-string", "4999999"), ("amount-float", 4999999.5)):
        body = reserve_then_decline(tx_id, "agent-7")
        body["steps"][1]["payload"]["amount"] = amount
        await refuse(body, "invalid_payload", "payload.amount")

    # Nothing of the refused submissions anywhere.
    for tx_id in refused:
        assert (await recon.get(tx_id)).status_code == 404
    assert not set(refused) & await command_tx_ids(stack.kafka_bootstrap, stack.topic_prefix)
    assert await recon.calls() == []

    # An undo counts against its operation's quota: the 500 charge's refund is past the
    # refund quota's 100, so it is held for a person and never reaches the provider.
    body = {
        "tx_id": "refund-over-quota",
        "agent_id": "agent-7",
        "steps": [
            {
                "action": "charge",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": {"amount": 500, "currency": "usd", "customer": "cus_1"},
                "compensation": {"operation": "payments.refund"},
            },
            {
                "action": "declined",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": {"amount": 10, "currency": "usd", "customer": "cus_decline"},
            },
        ],
    }
    assert (await recon.submit(body)).status_code == 202
    tx = await recon.wait_terminal("refund-over-quota")
    assert tx["status"] == "manual_review", tx
    assert op(tx, "charge")["state"] == "manual_review", tx
    reviews = (await recon.http.get(f"{recon.intake_url}/v1/reviews", headers=AGENT)).json()
    assert [(r["tx_id"], r["reason"]) for r in reviews["reviews"]] == [
        ("refund-over-quota", "quota_exceeded")
    ]
    assert [c for c in await recon.calls() if c["operation"] == "payments.refund"] == []
