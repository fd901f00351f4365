"""Who sees which drift through `GET /v1/drift`: a tenant's own drift to that tenant only;
drift that belongs to no tenant (an effect matching no intent) to every tenant's key, agent
and operator alike, without its payload, and in full only to the deployment's admin keys
(RECON_ADMIN_KEYS), which see no tenant's own drift. Real intake app, real Postgres and Kafka; the
drift rows are written by the projector's own writer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from support.intake_app import intake_client, settings_fixture

from events.definition import Leg
from projections.writer import project_drift
from reconcilers.drift import Effect, LedgerEntry, compare
from services.config import Operator, Settings

NOW = datetime.now(UTC)
ACME = {"Authorization": "Bearer key-acme"}
GLOBEX = {"Authorization": "Bearer key-globex"}
GLOBEX_OPERATOR = {"Authorization": "Bearer ops-globex"}
ACME_OPERATOR = {"Authorization": "Bearer ops-acme"}
ADMIN = {"Authorization": "Bearer admin-key"}
# Acme's customer, email and amount: what must never reach another tenant.
SECRET_PAYLOAD = {"amount": 987654, "currency": "usd", "customer": "cus_acme_vip"}
EMAIL_PAYLOAD = {"to": "ceo@acme.example", "template": "receipt"}


settings = settings_fixture(
    api_keys={"key-acme": "acme", "key-globex": "globex"},
    operator_keys={
        "ops-acme": Operator("acme", "alice"),
        "ops-globex": Operator("globex", "gus"),
    },
    admin_keys={"admin-key": "ada"},
)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with intake_client(settings) as http:
        yield http


async def _project_drift(settings: Settings) -> None:
    """Acme's mismatch (its own drift) and two effects that match no intent, one carrying an
    Acme customer's charge (a key the scan did not know yet), one an Acme email."""
    acme_charge = LedgerEntry(
        tenant="acme",
        tx_id="acme-tx",
        action="charge",
        leg=Leg.FORWARD,
        op_key="rk1_acme",
        provider="sandbox",
        operation="payments.charge",
        payload=SECRET_PAYLOAD,
        dispatched_at=NOW - timedelta(hours=1),
        confirmed=True,
    )
    effects = [
        Effect(
            "ch_acme",
            "payments.charge",
            "rk1_acme",
            {**SECRET_PAYLOAD, "amount": 1},
            NOW - timedelta(hours=1),
        ),
        Effect(
            "ch_stray", "payments.charge", "rk1_unknown", SECRET_PAYLOAD, NOW - timedelta(hours=1)
        ),
        Effect("em_stray", "email.send", "rk1_unknown_2", EMAIL_PAYLOAD, NOW - timedelta(hours=1)),
    ]
    found = compare(
        provider="sandbox",
        effects=effects,
        ledger=[acme_charge],
        known_keys=set(),
        now=NOW,
        window_start=NOW - timedelta(days=1),
        grace=timedelta(seconds=60),
    )
    assert sorted(d.kind.value for d in found) == [
        "effect_without_intent",
        "effect_without_intent",
        "mismatch",
    ]
    conn = await asyncpg.connect(settings.database_url)
    try:
        await project_drift(conn, settings.topics.drift, [(0, i, d) for i, d in enumerate(found)])
    finally:
        await conn.close()


async def _drift(client: httpx.AsyncClient, headers: dict[str, str]) -> list[dict[str, Any]]:
    response = await client.get("/v1/drift", headers=headers)
    assert response.status_code == 200, response.text
    drift: list[dict[str, Any]] = response.json()["drift"]
    return drift


async def test_another_tenants_key_never_sees_a_tenants_drift_payload(
    settings: Settings, client: httpx.AsyncClient
) -> None:
    await _project_drift(settings)

    globex = await _drift(client, GLOBEX)
    # Tenant-less drift is listed, so globex knows something is off at the provider ...
    assert sorted((d["kind"], d["effect_id"]) for d in globex) == [
        ("effect_without_intent", "ch_stray"),
        ("effect_without_intent", "em_stray"),
    ]
    assert {d["detail"]["operation"] for d in globex} == {"payments.charge", "email.send"}
    assert all(d["detail"]["redacted"] is True for d in globex)
    # ... but nothing of acme's customers, emails or amounts, anywhere in the answer.
    text = json.dumps(globex)
    for secret in ("cus_acme_vip", "987654", "ceo@acme.example", "rk1_unknown"):
        assert secret not in text

    # An operator of globex sees the tenant-less drift redacted too (issue 18, item 13:
    # this test asserted the full detail here, the very leak closed), not acme's own drift.
    operator = await _drift(client, GLOBEX_OPERATOR)
    assert sorted(d["effect_id"] for d in operator) == ["ch_stray", "em_stray"]
    assert all(d["detail"]["redacted"] is True for d in operator)
    text = json.dumps(operator)
    for secret in ("cus_acme_vip", "987654", "ceo@acme.example", "rk1_unknown", "rk1_acme"):
        assert secret not in text

    # The deployment admin sees the tenant-less drift in full, and no tenant's own drift.
    admin = await _drift(client, ADMIN)
    assert sorted(d["effect_id"] for d in admin) == ["ch_stray", "em_stray"]
    stray = next(d for d in admin if d["effect_id"] == "ch_stray")
    assert stray["detail"]["payload"] == SECRET_PAYLOAD
    assert "rk1_acme" not in json.dumps(admin)

    # Acme's agent key: its own drift in full, tenant-less drift redacted.
    acme = await _drift(client, ACME)
    own = next(d for d in acme if d["kind"] == "mismatch")
    assert own["tx_id"] == "acme-tx" and own["detail"]["amount"] == {
        "recon": 987654,
        "provider": 1,
    }
    assert all(d["detail"].get("redacted") for d in acme if d["kind"] != "mismatch")
    acme_operator = await _drift(client, ACME_OPERATOR)
    assert len(acme_operator) == 3
    assert all(d["detail"].get("redacted") for d in acme_operator if d["kind"] != "mismatch")


async def test_an_admin_key_opens_no_other_door(client: httpx.AsyncClient) -> None:
    # Deployment-wide, not a tenant's: every tenant-scoped route takes it for an unknown key.
    assert (await client.get("/v1/transactions/nope", headers=ADMIN)).status_code == 401
    assert (await client.get("/v1/reviews", headers=ADMIN)).status_code == 401


async def test_an_operator_key_authenticates_as_its_tenant(
    client: httpx.AsyncClient,
) -> None:
    assert (await client.get("/v1/transactions/nope", headers=GLOBEX_OPERATOR)).status_code == 404
    assert (
        await client.get("/v1/drift", headers={"Authorization": "Bearer ops-nobody"})
    ).status_code == 401
