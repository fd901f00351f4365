"""`GET /v1/catalog` (docs/contract.md, "v1 additions"): every configured provider's operations
with the class and reversibility the gate and the retry policy read, for any key of the
tenant. The route reads no database, so the app is driven without its lifespan."""

import dataclasses

import httpx
from recon_sdk import AsyncRecon
from support.catalogs import SANDBOX_NAMES

from services.config import load_settings
from services.intake.app import create_app


async def _get(key: str | None) -> httpx.Response:
    settings = dataclasses.replace(
        load_settings(), providers={"sandbox": "http://127.0.0.1:9", "other": "http://x:1"}
    )
    transport = httpx.ASGITransport(app=create_app(settings))
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(transport=transport, base_url="http://intake") as http:
        return await http.get("/v1/catalog", headers=headers)


async def test_the_catalog_lists_each_operations_class_reversibility_and_undo() -> None:
    agent, operator = await _get("demo-key"), await _get("ops-key")
    assert agent.status_code == 200, agent.text
    assert agent.json() == operator.json()
    operations = agent.json()["operations"]
    assert {(o["provider"], o["operation"]) for o in operations} == {
        (p, name) for p in ("sandbox", "other") for name in SANDBOX_NAMES
    }
    by_name = {o["operation"]: o for o in operations if o["provider"] == "sandbox"}
    assert by_name["records.delete"] == {
        "provider": "sandbox",
        "operation": "records.delete",
        "class": "destructive",
        "reversibility": "irreversible",
        "compensation": None,
        "undo": None,
        "payload_schema": by_name["records.delete"]["payload_schema"],
        "amount_field": None,
        "undo_payload": None,
    }
    assert by_name["payments.charge"]["amount_field"] == "amount"
    assert by_name["inventory.reserve"]["payload_schema"]["required"] == ["sku"]
    assert by_name["payments.charge"]["class"] == "write"
    # The one operation an agent may name as the step's compensation, and no other; `undo`
    # is v1's name for it, kept equal for one release.
    for operation, compensation in (
        ("payments.charge", "payments.refund"),
        ("inventory.reserve", "inventory.release"),
    ):
        assert by_name[operation]["compensation"] == by_name[operation]["undo"] == compensation
    assert by_name["payments.charge"]["reversibility"] == "compensating_only"
    assert (await _get(None)).status_code == 401


async def test_the_sdk_reads_the_catalog_typed() -> None:
    settings = dataclasses.replace(load_settings(), providers={"sandbox": "http://127.0.0.1:9"})
    transport = httpx.ASGITransport(app=create_app(settings))
    async with (
        httpx.AsyncClient(transport=transport) as http,
        AsyncRecon("http://intake", api_key="demo-key", http=http) as recon,
    ):
        entries = await recon.catalog()
    charge = next(e for e in entries if e.operation == "payments.charge")
    assert (charge.provider, charge.class_, charge.compensation) == (
        "sandbox",
        "write",
        "payments.refund",
    )
    assert charge.amount_field == "amount" and charge.payload_schema is not None
    assert {e.operation for e in entries} == set(SANDBOX_NAMES)
