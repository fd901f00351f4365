"""Webhooks of a tenant's own provider account (docs/providers.md, "Per-tenant accounts"),
against the real broker and database: a delivery is verified with the secret of the account
it was sent to, and proves only what that account holds.

acme calls the sandbox through its own account; its operation must be settled by a delivery
its own account signed, never by one the shared account signed (whose holder is not acme).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from support.delivery_rows import written
from support.intake_app import intake_client, settings_fixture
from test_webhook_ingress import NEW_SECRET, OP_KEY, event_body, observations, records

from events.drift import DriftDetected, DriftKind
from reconcilers.signatures import sign_standard
from services.config import ProviderAccount, Settings

ACME_SECRET = "whsec_YWNtZS1vd24tYWNjb3VudA"
OWN = "/v1/webhooks/sandbox/accounts/acme"

settings = settings_fixture(
    webhook_secrets={"sandbox": (NEW_SECRET,)},
    provider_accounts={
        ("acme", "sandbox"): ProviderAccount("http://127.0.0.1:9", webhook_secrets=(ACME_SECRET,))
    },
)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with intake_client(settings) as http:
        conn = await asyncpg.connect(settings.database_url)
        try:
            await conn.execute(
                "INSERT INTO operations (tenant, tx_id, action, position, kind, provider,"
                " operation, op_key, state, attempts, evidence, updated_at)"
                " VALUES ('acme', 'order-1', 'charge', 0, 'step', 'sandbox',"
                " 'payments.charge', $1, 'unknown', 1, '[]', now())",
                OP_KEY,
            )
        finally:
            await conn.close()
        yield http


async def post(client: httpx.AsyncClient, path: str, event_id: str, secret: str) -> httpx.Response:
    body = event_body(event_id, f"ch_{event_id}", OP_KEY)
    headers = sign_standard(secret, event_id, int(time.time()), body)
    return await client.post(path, content=body, headers=headers)


async def test_the_own_accounts_endpoint_settles_the_tenants_operation(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    response = await post(client, OWN, "evt_1", ACME_SECRET)

    assert (response.status_code, response.json()["status"]) == (200, "accepted")
    [(_, observed)] = await observations(settings)
    assert (observed.tenant, observed.tx_id, observed.op_key) == ("acme", "order-1", OP_KEY)
    assert observed.message_id == "webhook:acme/sandbox:evt_1"
    # Deduplicated within the account: another account's delivery ids are its own.
    await written(settings.database_url, [("acme/sandbox", "evt_1")])


async def test_the_shared_accounts_signature_never_settles_an_own_accounts_operation(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    # Validly signed by the shared account, naming acme's key: acme's calls never went
    # there, so whoever made that effect is not acme's provider. Drift, not evidence.
    response = await post(client, "/v1/webhooks/sandbox", "evt_shared", NEW_SECRET)

    assert (response.status_code, response.json()["status"]) == (200, "accepted")
    assert await observations(settings) == []
    [(_, value)] = await records(settings, settings.topics.drift)
    report = DriftDetected.model_validate_json(value)
    assert (report.kind, report.tenant) == (DriftKind.EFFECT_WITHOUT_INTENT, None)


async def test_an_own_endpoint_takes_only_its_own_accounts_signature(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    shared_secret = await post(client, OWN, "evt_a", NEW_SECRET)
    no_such_account = await post(
        client, "/v1/webhooks/sandbox/accounts/globex", "evt_b", ACME_SECRET
    )
    bad_name = await post(client, "/v1/webhooks/sandbox/accounts/a%20b", "evt_c", ACME_SECRET)

    assert (shared_secret.status_code, shared_secret.json()["error"]) == (401, "bad_signature")
    assert (no_such_account.status_code, no_such_account.json()["error"]) == (
        404,
        "unknown_account",
    )
    assert bad_name.status_code == 422
    assert await observations(settings) == []
    assert await records(settings, settings.topics.drift) == []
