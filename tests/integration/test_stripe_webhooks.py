"""A signed Stripe webhook settles an unknown Stripe operation: the intake verifies the
`Stripe-Signature`, reads the event with the Stripe adapter's reader and produces the
observation of the confirm whose request caused it; the decider then confirms the step.

Real Kafka and Postgres (the intake in-process over ASGI, the leg projected from the
decider's own events), the production Stripe adapter against the stateful Stripe fake for
the intent, the event in Stripe's shape around the fake's intent.
"""

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest
from support import stripe_events
from support.intake_app import intake_client, intake_settings
from support.stripe_events import event
from support.stripe_fake import API_KEY, running_fake
from support.stripe_legs import LostConfirm, lost_confirm
from test_webhook_ingress import observations

from events.inputs import Outcome, Source
from events.transaction_events import OperationConfirmed
from projections.writer import project_batch
from reconcilers.signatures import Scheme, sign_stripe
from services.config import Settings
from services.providers.http import ProviderHttp
from services.providers.interface import ProviderAdapter
from services.providers.registry import build_accounts
from transactions.transaction import handle

TENANT = "acme"
WHSEC = "whsec_stripe-endpoint-secret"


@dataclass
class Rig:
    client: httpx.AsyncClient
    settings: Settings
    adapter: ProviderAdapter


@pytest.fixture
async def rig(infra: object, fresh_database: str, topic_prefix: str) -> AsyncIterator[Rig]:
    async with running_fake() as (_, url), ProviderHttp(5.0, connect_s=2.0) as http:
        settings = await intake_settings(
            infra,
            fresh_database,
            topic_prefix,
            providers={"sandbox": "http://127.0.0.1:9", "pay": url},
            provider_adapters={"pay": "stripe"},
            provider_secrets={"pay": API_KEY},
            webhook_secrets={"pay": (WHSEC,)},
            # What load_settings reads from the stripe adapter's declared scheme.
            webhook_schemes={"pay": Scheme.STRIPE},
        )
        adapter = build_accounts(http, settings).adapter_for(TENANT, "pay")
        assert adapter is not None
        async with intake_client(settings) as client:
            yield Rig(client, settings, adapter)


async def strand_confirm(rig: Rig, tx_id: str) -> LostConfirm:
    """A confirm whose call reached Stripe and whose answer was lost: the decider's state
    and the projection hold it `unknown`, Stripe holds the intent succeeded."""
    lost = await lost_confirm(rig.adapter, TENANT, tx_id, datetime.now(UTC) - timedelta(minutes=1))
    conn = await asyncpg.connect(rig.settings.database_url)
    try:
        await project_batch(conn, "recon.events", [(0, i, e) for i, e in enumerate(lost.log)])
        shown = await conn.fetchval("SELECT state FROM operations WHERE op_key = $1", lost.key)
    finally:
        await conn.close()
    assert shown == "unknown"
    return lost


async def deliver(rig: Rig, body: bytes, secret: str = WHSEC) -> httpx.Response:
    headers = {**sign_stripe(secret, int(time.time()), body), "content-type": "application/json"}
    return await rig.client.post("/v1/webhooks/pay", content=body, headers=headers)


async def test_a_signed_stripe_event_settles_the_unknown_confirm_that_caused_it(rig: Rig) -> None:
    lost = await strand_confirm(rig, "wh-stripe-1")
    state, key, intent = lost.state, lost.key, lost.intent
    # Stripe's event of the confirm request, around the intent the fake holds.
    body = json.dumps(event("payment_intent.succeeded", intent, key, "evt_wh1")).encode()

    forged = await deliver(rig, body, secret="whsec_someone-else")
    assert forged.status_code == 401 and await observations(rig.settings) == []

    answer = await deliver(rig, body)

    assert (answer.status_code, answer.json()["status"]) == (200, "accepted")
    [(_, observed)] = await observations(rig.settings)
    assert (observed.op_key, observed.source, observed.outcome) == (
        key,
        Source.WEBHOOK,
        Outcome.SUCCEEDED,
    )
    assert observed.remote_id == intent["id"]
    # The decider confirms the step on it: the unknown is settled by the webhook alone.
    _, settled = handle(state, observed)
    assert [e.type for e in settled][:1] == [OperationConfirmed.__name__]
    conn = await asyncpg.connect(rig.settings.database_url)
    try:
        await project_batch(conn, "recon.events", [(0, 100 + i, e) for i, e in enumerate(settled)])
        shown = await conn.fetchval("SELECT state FROM operations WHERE op_key = $1", key)
    finally:
        await conn.close()
    assert shown == "confirmed"


async def test_an_event_stripe_raised_on_its_own_is_remembered_and_settles_nothing(
    rig: Rig,
) -> None:
    customer = {"id": "cus_QXg1hqf4jFNsqG", "object": "customer", "metadata": {}}
    body = json.dumps(event("customer.created", customer, None, "evt_wh2")).encode()

    first = await deliver(rig, body)
    again = await deliver(rig, body)

    assert first.json() == {"status": "ignored", "type": "customer.created"}
    assert again.json() == {"status": "duplicate"}  # its retries are duplicates
    assert await observations(rig.settings) == []


async def test_a_body_that_is_no_stripe_event_is_refused_and_not_remembered(rig: Rig) -> None:
    body = json.dumps({"id": "evt_wh3", "type": "payment_intent.succeeded"}).encode()

    first = await deliver(rig, body)
    again = await deliver(rig, body)

    for answer in (first, again):
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid_webhook")


async def test_a_refund_stripe_settled_later_is_matched_by_the_key_it_was_made_under(
    rig: Rig,
) -> None:
    """A pending refund that succeeded later: Stripe's event names no request of recon's
    (another request updated it), and the refund's own `metadata[op_key]` finds the leg,
    tried after the request's key (webhook_store.operation_by_key, in order)."""
    key = "rk1_" + "r" * 40
    conn = await asyncpg.connect(rig.settings.database_url)
    try:
        await conn.execute(
            "INSERT INTO operations (tenant, tx_id, action, position, kind, provider,"
            " operation, op_key, state, attempts, evidence, updated_at)"
            " VALUES ($1, 'wh-refund', 'refund', 0, 'step', 'pay',"
            " 'refunds.create', $2, 'unknown', 1, '[]', now())",
            TENANT,
            key,
        )
    finally:
        await conn.close()
    settled = stripe_events.refund("succeeded", key)
    body = json.dumps(event("refund.updated", settled, "dashboard-key", "evt_wh4")).encode()

    answer = await deliver(rig, body)

    assert answer.json()["status"] == "accepted"
    [(_, observed)] = await observations(rig.settings)
    assert (observed.tx_id, observed.op_key, observed.outcome) == (
        "wh-refund",
        key,
        Outcome.SUCCEEDED,
    )
    assert observed.remote_id == settled["id"]
