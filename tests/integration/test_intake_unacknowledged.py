"""A command Kafka never acknowledged is no promise and burns nothing (issue 7, items 4 and
12), against the real broker and database: the broker is killed so that the intake's
produce fails, as it does in production.

The intake runs in-process; no decider runs, so the projection only holds what a test
writes into it (the state the decider would have left).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import httpx
import pytest
from support.intake_app import intake_client, settings_fixture
from support.topic_records import read_records

from events.inputs import ResolveReview, SubmitTransaction, parse_input
from services.config import Settings
from services.devtools.infra.kafka import KafkaBroker
from services.intake.example import example_transaction

ACME = {"Authorization": "Bearer key-acme"}
OPS = {"Authorization": "Bearer ops-acme"}
# Short for the test, but longer than the delivery of the failed attempt can take here:
# the broker stays down until the producer has given that record up.
HORIZON_S = 20.0
FIRST: dict[str, Any] = example_transaction("order-7")


def corrected() -> dict[str, Any]:
    body = copy.deepcopy(FIRST)
    body["steps"][1]["payload"]["amount"] = 4200
    return body


settings = settings_fixture(pending_horizon_s=HORIZON_S)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with intake_client(settings, headers=ACME) as http:
        yield http


async def sql(settings: Settings, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(settings.database_url)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


async def commands(settings: Settings) -> list[Any]:
    """Every command on the topic (the intake answers after the ack: it is all there)."""
    topic = settings.topics.commands
    return [
        parse_input(r.value or b"")
        for r in await read_records(settings.kafka_bootstrap, topic, "read_uncommitted")
    ]


async def until(request: Callable[[], Awaitable[httpx.Response]], status: int) -> httpx.Response:
    """Repeat the request until it answers `status` (a client retrying after a 409/503)."""
    deadline = time.monotonic() + HORIZON_S + 60
    while True:
        response = await request()
        if response.status_code == status or time.monotonic() > deadline:
            return response
        await asyncio.sleep(1)


async def test_a_submission_kafka_never_acknowledged_is_not_accepted_and_frees_its_tx_id(
    client: httpx.AsyncClient, settings: Settings, kafka_broker: KafkaBroker
) -> None:
    kafka_broker.kill()
    try:
        failed = await client.post("/v1/transactions", json=FIRST)
        assert failed.status_code == 503, failed.text
        assert failed.headers["Retry-After"] == "1"

        # Nothing was promised: the tx_id is unknown, not `accepted`, and an abort of it
        # is refused rather than answered 202 and dropped.
        assert (await client.get("/v1/transactions/order-7")).status_code == 404
        assert (await client.get("/v1/transactions/order-7/events")).status_code == 404
        abort = await client.post("/v1/transactions/order-7/abort")
        assert abort.status_code == 404, abort.text
        # The first command may still be on its way: a different body must wait.
        early = await client.post("/v1/transactions", json=corrected())
        assert early.status_code == 409, early.text
        assert early.json()["error"] == "tx_pending"
        assert "retry in" in early.json()["message"]
        # The same wait as a header, which the SDK's resends honour.
        assert 1 <= int(early.headers["Retry-After"]) <= HORIZON_S
    finally:
        kafka_broker.start()

    # Once the first command can no longer land and nothing was projected for the tx_id,
    # the corrected body takes it.
    taken = await until(lambda: client.post("/v1/transactions", json=corrected()), 202)
    assert taken.status_code == 202, taken.text
    view = (await client.get("/v1/transactions/order-7")).json()
    assert view["status"] == "accepted"
    submitted = [c for c in await commands(settings) if isinstance(c, SubmitTransaction)]
    assert [c.operations[1].payload["amount"] for c in submitted] == [4200]
    # The first body is now the one that conflicts.
    assert (await client.post("/v1/transactions", json=FIRST)).status_code == 409


async def test_a_different_body_never_takes_a_tx_id_the_decider_has_accepted(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    # The state a lost acknowledgement leaves behind: the row says unacknowledged (and is
    # long past the horizon), but the command did land and the decider accepted it.
    await sql(
        settings,
        "INSERT INTO intents (tenant, tx_id, fingerprint, agent_id, operations, produced,"
        " attempted_at) VALUES ('acme', 'order-7', 'f-first', 'agent-7', '[]', false,"
        " now() - interval '1 hour')",
    )
    await sql(
        settings,
        "INSERT INTO transactions (tenant, tx_id, status, agent_id, last_seq, created_at,"
        " updated_at) VALUES ('acme', 'order-7', 'running', 'agent-7', 1, now(), now())",
    )

    response = await client.post("/v1/transactions", json=corrected())

    assert response.status_code == 409, response.text
    assert response.json()["error"] == "tx_conflict"
    assert await commands(settings) == []


async def test_a_review_resolution_kafka_never_acknowledged_does_not_wedge_the_review(
    client: httpx.AsyncClient, settings: Settings, kafka_broker: KafkaBroker
) -> None:
    # An open review, as the projector writes it from OperationNeedsReview.
    await sql(
        settings,
        "INSERT INTO reviews (id, tenant, tx_id, action, leg, op_key, attempt, reason, state,"
        " created_at) VALUES ('rv_1', 'acme', 'order-7', 'charge', 'forward', 'rk1_x', 1,"
        " 'lookup_budget_exhausted', 'open', now())",
    )
    wrong = {"resolution": "applied", "note": "looked at the wrong charge", "actor": "ops"}
    right = {"resolution": "not_applied", "note": "no such charge", "actor": "body-says"}

    # An agent must not settle its own unknowns: its key is refused, and claims nothing.
    agent = await client.post("/v1/reviews/rv_1/resolve", json=right)
    assert (agent.status_code, agent.json()["error"]) == (403, "operator_only"), agent.text

    kafka_broker.kill()
    try:
        failed = await client.post("/v1/reviews/rv_1/resolve", json=wrong, headers=OPS)
        assert failed.status_code == 503, failed.text
        early = await client.post("/v1/reviews/rv_1/resolve", json=right, headers=OPS)
        assert early.status_code == 409, early.text
        assert early.json()["error"] == "resolution_pending"
    finally:
        kafka_broker.start()

    taken = await until(
        lambda: client.post("/v1/reviews/rv_1/resolve", json=right, headers=OPS), 200
    )
    assert taken.status_code == 200, taken.text
    assert taken.json()["resolution"] == "not_applied"
    resolutions = [c for c in await commands(settings) if isinstance(c, ResolveReview)]
    assert [c.resolution.value for c in resolutions] == ["not_applied"]
    # The resolver is the operator key's person, whatever the body's (deprecated) actor says.
    assert [c.actor for c in resolutions] == ["ops"]
    # Acknowledged now: any other resolution is refused.
    again = await client.post("/v1/reviews/rv_1/resolve", json=wrong, headers=OPS)
    assert again.status_code == 409 and again.json()["error"] == "review_already_resolved"
