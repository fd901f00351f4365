"""A payload names only the tenant's own provider resources (issue 18, item 6): a refund of
a charge another tenant's operation created, or a delete of a record no account of the
tenant holds, is refused 403 `resource_not_owned` with nothing recorded; the tenant's own
are accepted. Real intake app, real Postgres and Kafka."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from support.intake_app import intake_client, settings_fixture

from services.config import Settings

ACME = {"Authorization": "Bearer key-acme"}
GLOBEX = {"Authorization": "Bearer key-globex"}

settings = settings_fixture(
    api_keys={"key-acme": "acme", "key-globex": "globex"},
    tenant_resources={"globex": ("rec-globex-*",)},
)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with intake_client(settings) as http:
        # Acme's confirmed charge, as the projector writes it (the app applied the schema).
        conn = await asyncpg.connect(settings.database_url)
        try:
            await conn.execute(
                "INSERT INTO operations (tenant, tx_id, action, position, kind, provider,"
                " operation, op_key, state, attempts, evidence, updated_at, remote_id)"
                " VALUES ('acme', 'order-1', 'charge', 0, 'step', 'sandbox',"
                " 'payments.charge', 'rk1_acme', 'confirmed', 1, '[]', now(), 'ch_acme')"
            )
            # A charge whose undo is in review (the summary shows manual_review, the forward
            # leg was confirmed), and one whose forward leg itself is in review.
            await conn.execute(
                "INSERT INTO operations (tenant, tx_id, action, position, kind, provider,"
                " operation, op_key, state, attempts, evidence, updated_at, remote_id,"
                " comp_op_key, comp_state, comp_attempts, open_review_id) VALUES"
                " ('acme', 'order-2', 'charge', 0, 'step', 'sandbox', 'payments.charge',"
                " 'rk1_acme2', 'manual_review', 1, '[]', now(), 'ch_acme_undo_in_review',"
                " 'rk1_acme2c', 'manual_review', 3, 'rv_1'),"
                " ('acme', 'order-3', 'charge', 0, 'step', 'sandbox', 'payments.charge',"
                " 'rk1_acme3', 'manual_review', 1, '[]', now(), 'ch_acme_in_review',"
                " NULL, NULL, 0, 'rv_2')"
            )
        finally:
            await conn.close()
        yield http


def _tx(tx_id: str, operation: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "tx_id": tx_id,
        "agent_id": "agent-1",
        "steps": [
            {"action": "act", "provider": "sandbox", "operation": operation, "payload": payload}
        ],
    }


async def _intents(settings: Settings, tenant: str) -> int:
    conn = await asyncpg.connect(settings.database_url)
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM intents WHERE tenant = $1", tenant)
        return count
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("operation", "payload"),
    [
        ("payments.refund", {"amount": 100, "currency": "usd", "charge": "ch_acme"}),
        ("payments.refund", {"amount": 1, "charge": "x/../../effects?operation=payments.charge&"}),
        ("payments.refund", {"amount": 1, "charge": ["ch_acme"]}),
        ("records.delete", {"resource": "rec-acme-1"}),
    ],
    ids=["acmes-charge", "crafted-charge", "charge-not-a-string", "record-of-no-account"],
)
async def test_a_resource_the_tenant_did_not_create_is_refused_and_nothing_recorded(
    client: httpx.AsyncClient, settings: Settings, operation: str, payload: dict[str, Any]
) -> None:
    body = _tx("steal-1", operation, payload)
    response = await client.post("/v1/transactions", json=body, headers=GLOBEX)
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "resource_not_owned"
    assert "name a resource of your own" in response.json()["message"]
    preview = await client.post("/v1/previews", json=body, headers=GLOBEX)
    assert preview.status_code == 403 and preview.json()["error"] == "resource_not_owned"
    assert await _intents(settings, "globex") == 0


async def test_the_tenants_own_resources_are_accepted(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    # What acme's confirmed charge created
    refund = _tx("refund-1", "payments.refund", {"amount": 100, "charge": "ch_acme"})
    assert (await client.post("/v1/transactions", json=refund, headers=ACME)).status_code == 202
    # What globex's provider account holds
    delete = _tx("delete-1", "records.delete", {"resource": "rec-globex-7"})
    answer = await client.post("/v1/transactions", json=delete, headers=GLOBEX)
    assert answer.status_code == 202, answer.text


async def test_ownership_is_judged_by_the_forward_legs_own_state(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    # The undo is in review, but the charge was confirmed: the tenant created it.
    refund = _tx("refund-2", "payments.refund", {"amount": 1, "charge": "ch_acme_undo_in_review"})
    answer = await client.post("/v1/transactions", json=refund, headers=ACME)
    assert answer.status_code == 202, answer.text
    # The charge itself is in review: recon does not hold that it was created.
    pending = _tx("refund-3", "payments.refund", {"amount": 1, "charge": "ch_acme_in_review"})
    refused = await client.post("/v1/transactions", json=pending, headers=ACME)
    assert refused.status_code == 403 and refused.json()["error"] == "resource_not_owned"
