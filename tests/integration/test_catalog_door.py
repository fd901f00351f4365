"""The catalog comes from the providers, judged at the door (issue 20, item 2), on the real
intake with real Kafka and Postgres: a deployment with the sandbox and a Stripe account
(`pay`) takes a Stripe step and records the facts its adapter declares; a provider not
configured, an operation its provider does not declare and a payload outside the declared
schema are `422` naming what is wrong over HTTP and on the Kafka intents door alike, with
nothing recorded; a policy naming an operation no provider offers is not installed."""

from typing import Any

import asyncpg
from support.intake_app import intake_client, intake_settings
from support.intent_door import door, replies
from support.topic_records import read_records

from events.inputs import SubmitTransaction, parse_input
from services.config import Settings

AGENT = {"Authorization": "Bearer key-acme"}
OPERATOR = {"Authorization": "Bearer ops-acme"}


async def stripe_settings(infra: Any, database: str, prefix: str) -> Settings:
    return await intake_settings(
        infra,
        database,
        prefix,
        providers={"sandbox": "http://127.0.0.1:9", "pay": "http://127.0.0.1:9"},
        provider_adapters={"pay": "stripe"},
        provider_secrets={"pay": "sk_test_catalog"},
    )


def intent(tx_id: str, provider: str, operation: str, payload: dict[str, Any]) -> dict[str, Any]:
    step = {"action": "a", "provider": provider, "operation": operation, "payload": payload}
    return {"tx_id": tx_id, "agent_id": "agent-1", "steps": [step]}


REFUSED = {
    "c-provider": (
        intent("c-provider", "nobody", "payments.charge", {"amount": 1}),
        "unknown_provider",
        "known providers: pay, sandbox",
    ),
    "c-operation": (
        # Stripe's operation at the sandbox: each provider offers its own.
        intent("c-operation", "sandbox", "payment_intents.create", {"amount": 1}),
        "unknown_operation",
        "provider 'sandbox' has no operation 'payment_intents.create'",
    ),
    "c-payload": (
        intent("c-payload", "pay", "payment_intents.create", {"amount": "100", "currency": "usd"}),
        "invalid_payload",
        "payload.amount",
    ),
    "c-required": (
        intent("c-required", "pay", "payment_intents.create", {"amount": 100}),
        "invalid_payload",
        "payload.currency: required",
    ),
}


async def recorded(settings: Settings, tx_ids: set[str]) -> tuple[set[str], list[Any]]:
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch("SELECT tx_id FROM intents WHERE tx_id = ANY($1)", list(tx_ids))
    finally:
        await conn.close()
    commands = [
        parse_input(r.value)
        for r in await read_records(settings.kafka_bootstrap, settings.topics.commands)
        if r.value is not None
    ]
    return {r["tx_id"] for r in rows}, [c for c in commands if c.tx_id in tx_ids]


async def test_the_http_door_judges_by_the_configured_providers_catalog(
    infra: Any, fresh_database: str, topic_prefix: str
) -> None:
    settings = await stripe_settings(infra, fresh_database, topic_prefix)
    async with intake_client(settings) as http:
        for tx_id, (body, error, names) in REFUSED.items():
            response = await http.post("/v1/transactions", json=body, headers=AGENT)
            assert response.status_code == 422, (tx_id, response.text)
            assert response.json()["error"] == error, response.text
            assert names in response.json()["message"], response.text
        # A Stripe step, which the hard-coded catalog refused: accepted.
        good = intent(
            "c-stripe", "pay", "payment_intents.create", {"amount": 100, "currency": "usd"}
        )
        accepted = await http.post("/v1/transactions", json=good, headers=AGENT)
        assert accepted.status_code == 202, accepted.text

        listed = (await http.get("/v1/catalog", headers=AGENT)).json()["operations"]
        assert {"pay", "sandbox"} == {o["provider"] for o in listed}
        create = next(o for o in listed if o["operation"] == "payment_intents.create")
        assert (create["provider"], create["compensation"], create["amount_field"]) == (
            "pay",
            "payment_intents.cancel",
            "amount",
        )

        typo = {"version": 1, "agents": {"agent-1": {"grants": ["payments.chrage"]}}}
        refused = await http.put("/v1/policy", json=typo, headers=OPERATOR)
        assert refused.status_code == 422 and refused.json()["error"] == "unknown_operation"
        assert (await http.get("/v1/policy", headers=AGENT)).json()["version"] == 0

    intents, commands = await recorded(settings, {*REFUSED, "c-stripe"})
    assert intents == {"c-stripe"}  # nothing of a refusal was recorded
    (command,) = commands
    assert isinstance(command, SubmitTransaction)
    (step,) = command.operations
    # What the decider will read of the step is Stripe's declaration, recorded now.
    assert step.facts is not None
    assert (step.facts.side_effect, step.facts.reversibility) == ("write", "reversible")


async def test_the_kafka_door_refuses_the_same_intents_with_the_same_codes(
    infra: Any, fresh_database: str, topic_prefix: str
) -> None:
    settings = await stripe_settings(infra, fresh_database, topic_prefix)
    async with door(settings) as (produce, task):
        for tx_id, (body, _, _) in REFUSED.items():
            await produce(tx_id, body)
        answered = await replies(settings, set(REFUSED))
        assert not task.done(), task
    for tx_id, (_, error, names) in REFUSED.items():
        reply = answered[tx_id]
        assert (reply["status"], reply["http_status"], reply["error"]) == (
            "refused",
            422,
            error,
        ), reply
        assert names in reply["message"], reply
    intents, commands = await recorded(settings, set(REFUSED))
    assert intents == set() and commands == []
