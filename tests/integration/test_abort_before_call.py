"""Issue 18, item 17, second half: an abort that arrives before a step's call was begun stops
it. The intake records the abort on the intent row before producing it; the dispatcher's
last gate (services/dispatcher/calls_begun.py `begin`) refuses a never-begun step call of an
aborted transaction and answers `aborted_before_call`; the decider ends it as an abort.

Real parts: Postgres, Kafka and the sandbox provider (as a subprocess, called through the
production adapters); the last test runs the whole stack, its decider (which makes the
calls) held right before `begin` while the agent aborts. The witness of "no call" is the
provider's own call log."""

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from support import topic_records
from support.begun_by import DEAD_HOLDER, LAPSED_S
from support.crash_support import start_paused_at, wait_paused
from support.kafka_executor import KafkaExecutor
from support.recon_client import Recon, op
from support.sandbox_process import Sandbox, start_sandbox, stop

from events.aborted_before_call import ABORTED_BEFORE_CALL
from events.definition import Compensation, Leg, OperationKind, OperationSpec
from events.envelope import GENESIS_HASH, Envelope, seal
from events.keys import compensation_key
from events.topics import Topics
from events.transaction_events import OperationDispatched
from services.config import Settings
from services.crash_points import DISPATCHER_BEFORE_CALL_BEGUN
from services.devtools.sandbox.call_pages import every_call
from services.devtools.stack import Stack
from services.dispatcher import call_plan, calls_begun
from services.intake import intents
from services.intake.abort_record import record_abort
from services.intake.tenant_store import TenantStore
from services.kafka_setup import ensure_topics
from services.providers.http import ProviderHttp
from services.providers.registry import build_accounts

TENANT = "demo"
CHARGE = {"amount": 1299, "currency": "usd", "customer": "cus_1"}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    running = start_sandbox(tmp_path_factory.mktemp("abort-before-call") / "sandbox.sqlite3")
    yield running
    stop(running.process)


def specs(tx_id: str) -> tuple[OperationSpec, ...]:
    """A charge with its refund, then a receipt on commit."""
    key = f"k_{tx_id}_charge"
    return (
        OperationSpec(
            action="charge",
            kind=OperationKind.STEP,
            provider="sandbox",
            operation="payments.charge",
            payload=CHARGE,
            op_key=key,
            compensation=Compensation(operation="payments.refund"),
            compensation_key=compensation_key(key),
        ),
        OperationSpec(
            action="receipt",
            kind=OperationKind.ON_COMMIT,
            provider="sandbox",
            operation="email.send",
            payload={"to": "a@example.com", "template": "receipt"},
            op_key=f"k_{tx_id}_receipt",
        ),
    )


async def accepted(conn: asyncpg.Connection, tenant: str, tx_id: str) -> tuple[OperationSpec, ...]:
    """The intent row the intake writes (and marks produced) for an accepted submission."""
    intent = intents.Intent(tenant, tx_id, "f" * 64, "agent-7", specs(tx_id))
    await intents.claim(conn, intent, horizon_s=30)
    await intents.mark_produced(conn, intent)
    return intent.operations


async def begin(
    conn: asyncpg.Connection,
    tx_id: str,
    key: str,
    leg: Leg = Leg.FORWARD,
    attempt: int = 1,
    tenant: str = TENANT,
) -> call_plan.Begun:
    return await calls_begun.begin(
        conn,
        tenant=tenant,
        tx_id=tx_id,
        op_key=key,
        leg=leg.value,
        attempt=attempt,
        agent_id="agent-7",
        provider="sandbox",
        operation="payments.charge",
        holder=DEAD_HOLDER,
        lease_s=LAPSED_S,
        fence=None,
    )


WRITTEN = call_plan.Begun(switches=(), written=True)
STOPPED = call_plan.Begun(switches=(), written=False, aborted=True)


async def test_an_abort_stops_only_a_step_call_nobody_began_and_only_its_own_tenants(
    conn: asyncpg.Connection,
) -> None:
    charge, receipt = await accepted(conn, TENANT, "ab-1")
    await accepted(conn, "other", "ab-1")  # the same tx_id in another tenant
    began, _ = await accepted(conn, TENANT, "ab-2")
    assert await begin(conn, "ab-2", began.op_key) == WRITTEN  # begun before the abort
    await record_abort(TenantStore(conn, TENANT), "ab-1")
    await record_abort(TenantStore(conn, TENANT), "ab-2")

    # The step's call is not begun, under any attempt, and nothing says it was.
    assert await begin(conn, "ab-1", charge.op_key) == STOPPED
    assert await begin(conn, "ab-1", charge.op_key, attempt=2) == STOPPED
    assert not await calls_begun.was_begun(conn, TENANT, charge.op_key, "forward", 1)
    # An undo must still run, and a notification still tell.
    assert charge.compensation_key is not None
    assert await begin(conn, "ab-1", charge.compensation_key, Leg.COMPENSATION) == WRITTEN
    assert await begin(conn, "ab-1", receipt.op_key) == WRITTEN
    # A call begun before the abort stands (its retry too): the too-late rule applies.
    assert await begin(conn, "ab-2", began.op_key, attempt=2) == WRITTEN
    # The other tenant's transaction of the same tx_id was not aborted.
    assert await begin(conn, "ab-1", charge.op_key, tenant="other") == WRITTEN


def dispatch_of(spec: OperationSpec, tx_id: str) -> tuple[Envelope, OperationDispatched]:
    dispatch = OperationDispatched(
        action=spec.action,
        op_key=spec.op_key,
        attempt=1,
        lookup_first=False,
        provider=spec.provider,
        operation=spec.operation,
        payload=spec.payload,
    )
    [envelope] = seal(
        tenant=TENANT,
        tx_id=tx_id,
        last_seq=0,
        last_hash=GENESIS_HASH,
        events=[dispatch],
        causation_id="test",
        occurred_at=datetime.now(UTC),
    )
    return envelope, dispatch


async def test_an_aborted_step_reaches_no_provider_and_the_dispatcher_says_why(
    conn: asyncpg.Connection,
    kafka_bootstrap: str,
    fresh_database: str,
    topic_prefix: str,
    provider: Sandbox,
) -> None:
    """Also the intake that died between the abort's row and its produce: the row alone
    stops the call (no AbortTransaction exists here), and the answer is the abort."""
    charge, _ = await accepted(conn, TENANT, "ab-3")
    await record_abort(TenantStore(conn, TENANT), "ab-3")
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=fresh_database,
        topics=Topics(topic_prefix),
        environment="test",
        providers={"sandbox": provider.url},
    )
    await ensure_topics(kafka_bootstrap, settings.topics)
    async with ProviderHttp(5.0, connect_s=2.0) as http:
        dispatcher = KafkaExecutor(settings, build_accounts(http, settings))
        await dispatcher.producer.start()
        try:
            await dispatcher.call(*dispatch_of(charge, "ab-3"), 0)
        finally:
            await dispatcher.gate.close()
            await dispatcher.producer.stop()
    async with httpx.AsyncClient() as sandbox:
        assert await every_call(sandbox, provider.url, charge.op_key) == []
    records = await topic_records.read_records(kafka_bootstrap, settings.topics.observations)
    answers = [json.loads(r.value or b"") for r in records]
    assert [(a["op_key"], a["outcome"], a["error"], a["by_dispatcher"]) for a in answers] == [
        (charge.op_key, "rejected", ABORTED_BEFORE_CALL, True)
    ]


def one_irreversible_charge(tx_id: str) -> dict[str, Any]:
    return {
        "tx_id": tx_id,
        "agent_id": "agent-7",
        "steps": [
            {
                "action": "charge",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": CHARGE,
            }
        ],
    }


async def test_an_abort_answered_before_the_first_call_is_begun_stops_it(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    """The benchmark's case: a one-step irreversible transaction aborted right after its
    202. Its first dispatch is decided with its acceptance, so only the call's last gate can
    stop it; the decider (which makes the call) held right before it, the abort's 202 comes
    first."""
    marker = tmp_path / "paused"
    start_paused_at(stack, "decider", DISPATCHER_BEFORE_CALL_BEGUN, marker)
    accepted = await recon.submit(one_irreversible_charge("abort-first"), retry_unavailable=True)
    assert accepted.status_code == 202
    await wait_paused(stack, "decider", marker)
    aborted = await recon.abort("abort-first", {"reason": "changed its mind"})
    assert aborted.status_code == 202, aborted.text
    marker.unlink()  # the decider goes on to `begin`

    tx = await recon.wait_terminal("abort-first", timeout=90)
    assert tx["status"] == "failed", tx
    charge = op(tx, "charge")
    assert await recon.calls(charge["op_key"]) == []  # not an apply, not a lookup
    failed = [e for e in await recon.events("abort-first") if e["type"] == "TransactionFailed"]
    assert [e["data"]["reason"] for e in failed] == ["aborted"]
