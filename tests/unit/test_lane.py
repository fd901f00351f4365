"""The lane (services.intake.lane) answers every request of the routes it serves exactly as
FastAPI's routes do, and does the same: the same status, body and headers, the same records
produced and statements run, for a webhook accepted, a duplicate, an event ignored, a
submission accepted, and every refusal (a bad signature, a stale one, missing headers, an
unknown provider or account, an unreadable body, a missing or unknown API key, an agent the
key does not speak for, a body that is no submission, a database or a Kafka that does not
answer, text Postgres cannot store, a body over the limit, another method, a tenant name
FastAPI refuses).

Two apps of the same settings and fakes are driven side by side: one as built, one without
the lane (its routes then reached through FastAPI's router). No Kafka or Postgres: the
statements and the produce are faked at the seams the routes call (the pool,
DeliveryBatches, the producer), so what is compared is the HTTP layer alone."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

import asyncpg
import httpx
import pytest
from aiokafka.errors import KafkaTimeoutError
from fastapi import FastAPI
from fastapi.routing import APIRoute

from events.topics import Topics
from reconcilers.signatures import sign_standard
from reconcilers.webhook_intake import MatchedOperation
from services.config import ProviderAccount, Settings
from services.intake import transactions, webhook_store, webhooks
from services.intake.app import create_app
from services.intake.example import example_transaction
from services.intake.intent_claims import IntentClaims
from services.intake.lane import Lane
from services.intake.produced_marks import ProducedMarks
from services.providers.registry import Accounts

SECRET = "whsec_c2FuZGJveC1kZXYtc2VjcmV0"
OWN_SECRET = "whsec_YWNtZS1vd24tYWNjb3VudA"
OP_KEY = "rk1_" + "a" * 40


@dataclass
class Seams:
    """What the ingress's statements and its produce answer, and what they were asked."""

    seen: bool = False
    matched: MatchedOperation | None = field(
        default_factory=lambda: MatchedOperation("acme", "order-1", "charge", OP_KEY)
    )
    fail_lookup: Exception | None = None
    fail_produce: Exception | None = None
    fail_pool: Exception | None = None
    produced: list[tuple[str, bytes, dict[str, Any]]] = field(default_factory=list)
    remembered: list[str] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    headers: list[Any] = field(default_factory=list)  # each record's Kafka headers


class Conn:
    """A submission's statements: no policy installed, a new tx_id recorded."""

    def __init__(self, seams: Seams) -> None:
        self.seams = seams

    async def fetchrow(self, sql: str, *args: Any) -> dict[str, Any] | None:
        self.seams.statements.append(sql)
        return None

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        self.seams.statements.append(sql)
        return [{"in_force": True, "inserted": True} for _ in args[0]]

    async def execute(self, sql: str, *args: Any) -> str:
        self.seams.statements.append(sql)
        return "UPDATE 1"


class Pool:
    def __init__(self, seams: Seams) -> None:
        self.seams = seams

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Conn]:
        if self.seams.fail_pool is not None:
            raise self.seams.fail_pool
        yield Conn(self.seams)


class Batches:
    def __init__(self, seams: Seams) -> None:
        self.seams = seams

    async def look_up(self, asked: webhook_store.Asked) -> webhook_store.Delivery:
        if self.seams.fail_lookup is not None:
            raise self.seams.fail_lookup
        return webhook_store.Delivery(self.seams.seen, self.seams.matched)

    def remember(self, account: str, delivery_id: str, at: Any) -> None:
        self.seams.remembered.append(f"{account}/{delivery_id}")

    @asynccontextmanager
    async def reporting(self, drift_id: str, kind: str, at: Any) -> AsyncIterator[bool]:
        yield True  # every drift here is new


class Producer:
    def __init__(self, seams: Seams) -> None:
        self.seams = seams

    async def send_and_wait(
        self, topic: str, value: bytes, key: bytes, headers: Any = None, **_: Any
    ) -> None:
        if self.seams.fail_produce is not None:
            raise self.seams.fail_produce
        self.seams.headers.append(headers)
        record = json.loads(value)
        for clock in ("issued_at", "observed_at", "detected_at"):  # read per request
            record.pop(clock, None)
        self.seams.produced.append((topic, key, record))


SETTINGS = Settings(
    kafka_bootstrap="127.0.0.1:9",
    database_url="postgresql://nobody@127.0.0.1:9/none",
    topics=Topics(""),
    environment="test",
    api_keys={"key-acme": "acme", "key-bound": "acme"},
    key_agents={"key-bound": frozenset({"agent-1"})},
    providers={"sandbox": "http://127.0.0.1:9"},
    webhook_secrets={"sandbox": (SECRET,)},
    webhook_max_body_bytes=4096,
    provider_accounts={
        ("acme", "sandbox"): ProviderAccount("http://127.0.0.1:9", webhook_secrets=(OWN_SECRET,))
    },
)


def _app(seams: Seams, *, lane: bool) -> FastAPI:
    app = create_app(SETTINGS)
    if not lane:
        # Before the first request, which builds the middleware stack from this list.
        app.user_middleware = [m for m in app.user_middleware if m.cls is not Lane]  # type: ignore[comparison-overlap]
    app.state.delivery_batches = Batches(seams)
    app.state.producer = Producer(seams)
    app.state.pool = Pool(seams)
    app.state.intent_claims = IntentClaims(app.state.pool)
    app.state.produced_marks = ProducedMarks(app.state.pool)
    app.state.webhook_readers = Accounts({})
    return app


def _event(event_type: str = "effect.succeeded") -> bytes:
    effect = {"id": "ch_1", "idempotency_key": OP_KEY, "metadata": {"op_key": OP_KEY}}
    return json.dumps({"type": event_type, "data": {"effect": effect}}).encode()


# The webhook's clock, fixed for every case: a refusal for age words the age in seconds, and
# the two answers compared must not straddle a second boundary (nor the tolerance window
# the cases were signed in, were the suite slow).
NOW = int(time.time())


class _FixedClock(datetime):
    @classmethod
    def now(cls, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
        return datetime.fromtimestamp(NOW, tz)


@pytest.fixture(autouse=True)
def _fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhooks, "datetime", _FixedClock)


def _signed(body: bytes, secret: str = SECRET, at: int | None = None) -> dict[str, str]:
    return sign_standard(secret, "evt_1", NOW if at is None else at, body)


KEY = {"authorization": "Bearer key-acme"}
BOUND = {"authorization": "Bearer key-bound"}
SUBMISSION = json.dumps(example_transaction("order-1")).encode()
_unknown = example_transaction("order-2")
_unknown["steps"][0]["operation"] = "inventory.teleport"
UNKNOWN_OPERATION = json.dumps(_unknown).encode()

# (name, seams to set, method, path, headers, body)
Case = tuple[str, dict[str, Any], str, str, dict[str, str], bytes]
CASES: list[Case] = [
    ("accepted", {}, "POST", "/v1/webhooks/sandbox", _signed(_event()), _event()),
    ("duplicate", {"seen": True}, "POST", "/v1/webhooks/sandbox", _signed(_event()), _event()),
    (
        "ignored",
        {},
        "POST",
        "/v1/webhooks/sandbox",
        _signed(_event("effect.other")),
        _event("effect.other"),
    ),
    ("drift", {"matched": None}, "POST", "/v1/webhooks/sandbox", _signed(_event()), _event()),
    (
        "own account",
        {"matched": MatchedOperation("acme", "order-1", "charge", OP_KEY, "acme")},
        "POST",
        "/v1/webhooks/sandbox/accounts/acme",
        _signed(_event(), OWN_SECRET),
        _event(),
    ),
    ("bad signature", {}, "POST", "/v1/webhooks/sandbox", _signed(b"{}"), _event()),
    ("no headers", {}, "POST", "/v1/webhooks/sandbox", {}, _event()),
    ("stale", {}, "POST", "/v1/webhooks/sandbox", _signed(_event(), at=1_000_000), _event()),
    ("unknown provider", {}, "POST", "/v1/webhooks/nobody", _signed(_event()), _event()),
    (
        "unknown account",
        {},
        "POST",
        "/v1/webhooks/sandbox/accounts/zeta",
        _signed(_event()),
        _event(),
    ),
    (
        "tenant FastAPI refuses",
        {},
        "POST",
        "/v1/webhooks/sandbox/accounts/a.b",
        _signed(_event()),
        _event(),
    ),
    ("unreadable body", {}, "POST", "/v1/webhooks/sandbox", _signed(b"[1]"), b"[1]"),
    (
        "database down",
        {"fail_lookup": OSError("connection refused")},
        "POST",
        "/v1/webhooks/sandbox",
        _signed(_event()),
        _event(),
    ),
    (
        "text Postgres cannot store",
        {"fail_lookup": asyncpg.CharacterNotInRepertoireError("NUL")},
        "POST",
        "/v1/webhooks/sandbox",
        _signed(_event()),
        _event(),
    ),
    (
        "Kafka does not acknowledge",
        {"fail_produce": KafkaTimeoutError()},
        "POST",
        "/v1/webhooks/sandbox",
        _signed(_event()),
        _event(),
    ),
    ("over the limit", {}, "POST", "/v1/webhooks/sandbox", _signed(b"x" * 5000), b"x" * 5000),
    ("another method", {}, "GET", "/v1/webhooks/sandbox", {}, b""),
    ("trailing slash", {}, "POST", "/v1/webhooks/sandbox/", _signed(_event()), _event()),
    ("submitted", {}, "POST", "/v1/transactions", KEY, SUBMISSION),
    ("no API key", {}, "POST", "/v1/transactions", {}, SUBMISSION),
    ("unknown API key", {}, "POST", "/v1/transactions", {"authorization": "Bearer x"}, SUBMISSION),
    ("agent not bound", {}, "POST", "/v1/transactions", BOUND, SUBMISSION),
    ("no JSON", {}, "POST", "/v1/transactions", KEY, b"{"),
    ("no submission", {}, "POST", "/v1/transactions", KEY, b'{"tx_id": "a b"}'),
    ("unknown operation", {}, "POST", "/v1/transactions", KEY, UNKNOWN_OPERATION),
    (
        "database down at submission",
        {"fail_pool": OSError("refused")},
        "POST",
        "/v1/transactions",
        KEY,
        SUBMISSION,
    ),
    (
        "Kafka does not acknowledge the command",
        {"fail_produce": KafkaTimeoutError()},
        "POST",
        "/v1/transactions",
        KEY,
        SUBMISSION,
    ),
    ("submission over the limit", {}, "POST", "/v1/transactions", KEY, b" " * 2_000_000),
]


async def _answer(
    app: FastAPI, method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, bytes, dict[str, str]]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://intake") as http:
        response = await http.request(method, path, headers=headers, content=body)
    kept = {k: v for k, v in response.headers.items() if k != "date"}
    return response.status_code, response.content, kept


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
async def test_the_lane_answers_every_request_as_fastapis_route_does(case: Case) -> None:
    _, setting, method, path, headers, body = case
    answers, effects = [], []
    for lane in (True, False):
        seams = Seams()
        for name, value in setting.items():
            setattr(seams, name, value)
        answers.append(await _answer(_app(seams, lane=lane), method, path, headers, body))
        effects.append((seams.produced, seams.remembered, seams.statements))
    assert answers[0] == answers[1]
    assert effects[0] == effects[1]


async def test_a_request_the_lane_serves_never_reaches_fastapis_router(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lane is taken, not merely harmless: FastAPI's handling of the route is not run."""
    routed: list[str] = []
    for route in (*webhooks.router.routes, *transactions.router.routes):
        handle = route.handle

        async def counted(*args: Any, _handle: Any = handle, **kwargs: Any) -> None:
            routed.append("fastapi")
            await _handle(*args, **kwargs)

        monkeypatch.setattr(route, "handle", counted)
    status, content, _ = await _answer(
        _app(Seams(), lane=True), "POST", "/v1/webhooks/sandbox", _signed(_event()), _event()
    )
    assert (status, json.loads(content)) == (200, {"status": "accepted"})
    assert routed == []
    await _answer(
        _app(Seams(), lane=False), "POST", "/v1/webhooks/sandbox", _signed(_event()), _event()
    )
    assert routed == ["fastapi"]
    routed.clear()
    status, _, _ = await _answer(
        _app(Seams(), lane=True), "POST", "/v1/transactions", KEY, SUBMISSION
    )
    assert (status, routed) == (202, [])


def test_a_route_with_a_dependency_the_lane_does_not_supply_is_left_to_fastapi(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dependency added to a laned route later is never skipped: the route leaves the lane."""
    laned = {
        route.endpoint
        for route, _ in Lane(_app(Seams(), lane=True), _app(Seams(), lane=True))._routes
    }
    assert laned == {webhooks.receive, webhooks.receive_own, transactions.submit}
    submit = next(
        r
        for r in transactions.router.routes
        if isinstance(r, APIRoute) and r.endpoint is transactions.submit
    )
    monkeypatch.setattr(
        submit.dependant,
        "dependencies",
        [*submit.dependant.dependencies, *submit.dependant.dependencies],
    )
    laned = {
        route.endpoint
        for route, _ in Lane(_app(Seams(), lane=True), _app(Seams(), lane=True))._routes
    }
    assert laned == {webhooks.receive, webhooks.receive_own}


def test_a_route_that_takes_a_parameter_the_lane_does_not_supply_is_left_to_fastapi(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A query, header, cookie or body parameter added to a laned route later is never
    passed over: the route leaves the lane (the lane hands an endpoint only its request,
    path parameters and listed dependencies)."""
    submit = next(
        r
        for r in transactions.router.routes
        if isinstance(r, APIRoute) and r.endpoint is transactions.submit
    )
    webhook = next(
        r
        for r in webhooks.router.routes
        if isinstance(r, APIRoute) and r.endpoint is webhooks.receive
    )
    monkeypatch.setattr(submit.dependant, "query_params", list(webhook.dependant.path_params))
    laned = {
        route.endpoint
        for route, _ in Lane(_app(Seams(), lane=True), _app(Seams(), lane=True))._routes
    }
    assert laned == {webhooks.receive, webhooks.receive_own}
