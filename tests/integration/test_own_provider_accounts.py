"""Per-tenant provider accounts against real parts (issue 20, item 7): acme and globex each
have their own sandbox process (separate databases); the shared account is an address
nobody listens on, so a call that went there instead would be lost. acme's charge is made
in acme's sandbox only, its redelivery and the reconciler's lookup ask acme's sandbox
only, and the drift scan attributes an effect without intent in globex's account to
globex alone. Real Kafka and Postgres, the production dispatcher, reconciler and
adapters; the sandboxes' own call logs say who was asked."""

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
from support.kafka_executor import KafkaExecutor
from support.sandbox_process import Sandbox, start_sandbox, stop

from events.definition import Leg
from events.drift import DriftKind
from events.envelope import GENESIS_HASH, Envelope, seal
from events.topics import Topics
from events.transaction_events import OperationDispatched
from services.config import ProviderAccount, ReconcilerSettings, Settings
from services.devtools.ports import free_port
from services.devtools.sandbox.call_pages import every_call
from services.kafka_setup import ensure_topics
from services.providers.http import ProviderHttp
from services.providers.registry import build_accounts
from services.pull_reconciler.runtime import open_reconciler

CHARGE = {"amount": 1299, "currency": "usd", "customer": "cus_1"}


@dataclass(frozen=True)
class Sandboxes:
    acme: Sandbox
    globex: Sandbox
    # The shared account: nothing listens there.
    shared_url: str


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandboxes]:
    dbs: list[Path] = [tmp_path_factory.mktemp(n) / "sandbox.sqlite3" for n in ("acme", "globex")]
    # Started side by side: each start waits for its process to answer.
    with ThreadPoolExecutor(2) as pool:
        acme, globex = pool.map(start_sandbox, dbs)
    try:
        yield Sandboxes(acme, globex, f"http://127.0.0.1:{free_port()}")
    finally:
        stop(acme.process)
        stop(globex.process)


def accounts_settings(
    sandboxes: Sandboxes, kafka_bootstrap: str, database_url: str, topic_prefix: str
) -> Settings:
    return Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        topics=Topics(topic_prefix),
        environment="test",
        api_keys={"key-acme": "acme", "key-globex": "globex", "key-demo": "demo"},
        providers={"sandbox": sandboxes.shared_url},
        provider_accounts={
            ("acme", "sandbox"): ProviderAccount(sandboxes.acme.url),
            ("globex", "sandbox"): ProviderAccount(sandboxes.globex.url),
        },
        reconciler=ReconcilerSettings(drift_grace_s=0.001, after_s=0.001),
    )


async def asked(sandboxes: Sandboxes, key: str) -> dict[str, list[tuple[str, str]]]:
    """Each account's calls under `key`, as the sandbox logged them."""
    seen: dict[str, list[tuple[str, str]]] = {}
    async with httpx.AsyncClient(timeout=5) as http:
        for name, sandbox in (("acme", sandboxes.acme), ("globex", sandboxes.globex)):
            calls = await every_call(http, sandbox.url, key)
            seen[name] = [(c["kind"], c["outcome"]) for c in calls]
    return seen


def charge_dispatch(tenant: str, tx_id: str, op_key: str) -> tuple[Envelope, OperationDispatched]:
    dispatch = OperationDispatched(
        action="charge",
        leg=Leg.FORWARD,
        op_key=op_key,
        attempt=1,
        lookup_first=False,
        provider="sandbox",
        operation="payments.charge",
        payload=CHARGE,
    )
    [envelope] = seal(
        tenant=tenant,
        tx_id=tx_id,
        last_seq=0,
        last_hash=GENESIS_HASH,
        events=[dispatch],
        causation_id="test",
        occurred_at=datetime.now(UTC),
    )
    return envelope, dispatch


async def test_a_tenants_charge_and_its_redelivery_go_to_its_own_account_only(
    conn: asyncpg.Connection,
    sandboxes: Sandboxes,
    kafka_bootstrap: str,
    fresh_database: str,
    topic_prefix: str,
) -> None:
    settings = accounts_settings(sandboxes, kafka_bootstrap, fresh_database, topic_prefix)
    await ensure_topics(kafka_bootstrap, settings.topics)
    async with ProviderHttp(5.0, connect_s=2.0) as http:
        dispatcher = KafkaExecutor(settings, build_accounts(http, settings))
        await dispatcher.producer.start()
        try:
            envelope, dispatch = charge_dispatch("acme", "acme-tx", "k_acme_charge")
            await dispatcher.call(envelope, dispatch, 0)
            # Redelivered (its call was begun): it looks up first, in acme's account.
            await dispatcher.call(envelope, dispatch, 0)
        finally:
            await dispatcher.gate.close()
            await dispatcher.producer.stop()

    assert await asked(sandboxes, "k_acme_charge") == {
        "acme": [("apply", "applied"), ("lookup", "found")],
        "globex": [],
    }


async def _record_charge(conn: asyncpg.Connection, tenant: str, op_key: str, state: str) -> None:
    """What the projector holds of a charge dispatched an hour ago."""
    at = datetime.now(UTC) - timedelta(hours=1)
    await conn.execute(
        "INSERT INTO operations (tenant, tx_id, action, position, kind, provider,"
        " operation, op_key, state, attempts, evidence, updated_at)"
        " VALUES ($1, $2, 'charge', 0, 'step', 'sandbox', 'payments.charge', $3, $4, 1,"
        " '[]', $5)",
        tenant,
        f"{tenant}-{op_key}",
        op_key,
        state,
        at,
    )
    data = {
        "type": "OperationDispatched",
        "action": "charge",
        "leg": "forward",
        "op_key": op_key,
        "attempt": 1,
        "provider": "sandbox",
        "operation": "payments.charge",
        "payload": CHARGE,
    }
    await conn.execute(
        "INSERT INTO events (tenant, tx_id, seq, event_id, type, schema_version,"
        " causation_id, correlation_id, occurred_at, prev_hash, hash, data)"
        " VALUES ($1, $2, 1, $3, 'OperationDispatched', 1, 'test', 'test', $4, '', '', $5)",
        tenant,
        f"{tenant}-{op_key}",
        f"ev_{op_key}",
        at,
        json.dumps(data),
    )


async def _apply(http: httpx.AsyncClient, sandbox: Sandbox, op_key: str) -> None:
    """A charge made in `sandbox` under `op_key`, as the dispatcher makes it."""
    answer = await http.post(
        f"{sandbox.url}/v1/payments/charge",
        json={**CHARGE, "metadata": {"op_key": op_key}},
        headers={"Idempotency-Key": op_key},
    )
    assert answer.status_code == 200, answer.text


async def test_lookups_and_drift_are_per_account(
    sandboxes: Sandboxes, kafka_bootstrap: str, fresh_database: str, topic_prefix: str
) -> None:
    settings = accounts_settings(sandboxes, kafka_bootstrap, fresh_database, topic_prefix)
    # acme's charge left `unknown` (made in acme's account); acme's refund confirmed and
    # made there too; a charge in globex's account that no intent of recon's explains.
    async with httpx.AsyncClient(timeout=5) as http:
        await _apply(http, sandboxes.acme, "k_acme_unknown")
        await _apply(http, sandboxes.acme, "k_acme_confirmed")
        stray = await http.post(
            f"{sandboxes.globex.url}/v1/effects/unrecorded",
            json={"operation": "payments.charge", "payload": CHARGE},
        )
    assert stray.status_code == 200, stray.text
    async with open_reconciler(settings) as reconciler:
        async with reconciler.pool.acquire() as conn:
            await _record_charge(conn, "acme", "k_acme_unknown", "unknown")
            await _record_charge(conn, "acme", "k_acme_confirmed", "confirmed")
        report = await reconciler.tick()
        found = await reconciler.drift_scan()

    # The lookup of acme's leg asked acme's account, and found the charge there.
    assert [(key, outcome.value) for key, _, _, outcome in report.looked_up] == [
        ("k_acme_unknown", "succeeded")
    ]
    assert await asked(sandboxes, "k_acme_unknown") == {
        "acme": [("apply", "applied"), ("lookup", "found")],
        "globex": [],
    }
    # globex's stray charge is globex's drift, and the only drift found in globex's
    # account. acme's charges are in acme's account, where the ledger expects them: neither
    # is drift anywhere (compared with every account, each would be "without effect" in
    # globex's). Whatever else acme's account holds (the first test's charge, the sandboxes
    # are the module's) is acme's: nothing is tenant-less.
    assert [(d.kind, d.effect_id) for d in found if d.tenant == "globex"] == [
        (DriftKind.EFFECT_WITHOUT_INTENT, stray.json()["id"])
    ]
    assert {d.tenant for d in found} <= {"acme", "globex"}
    ours = {"k_acme_unknown", "k_acme_confirmed"}
    assert not [d for d in found if {d.op_key, d.detail.get("idempotency_key")} & ours]
