"""The list endpoints' pages (services.intake.pagination) on a real Postgres with the
projection, through the intake's routes and the SDK: `GET /v1/transactions` newest first
with its filters, and `/v1/reviews`, `/v1/drift`, a transaction's events, read page by
page, give every row once and nothing else; a cursor works only for the tenant, list and
filters it was made for.

Tenant `demo` owns five projected transactions (the real decider's events, projected by
the real writer); tenant `other` owns none and must see none of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from recon_sdk import AsyncRecon
from support.intake_app import intake_client, settings_fixture
from support.txbuilders import T0, log_of, observed, request_review, submit

from events.drift import DriftDetected, DriftKind, drift_id
from events.inputs import Outcome
from projections.writer import project_batch, project_drift
from services.config import Operator, Settings

DEMO, OTHER = {"Authorization": "Bearer key-demo"}, {"Authorization": "Bearer key-other"}
TXS = [f"tx-{n}" for n in range(1, 6)]

settings = settings_fixture(
    api_keys={"key-demo": "demo", "key-other": "other"},
    operator_keys={"ops-demo": Operator("demo", "ops")},
)


async def _seed(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        offset = 0
        for n, tx_id in enumerate(TXS, start=1):
            # tx-1 and tx-2 stop in review (each opens one), tx-2 sends an email on commit.
            notifications = ("receipt",) if tx_id == "tx-2" else ()
            inputs: list[Any] = [submit(["charge"], notifications, tx_id=tx_id)]
            if n <= 2:
                inputs += [
                    observed("charge", 1, Outcome.UNKNOWN, n=1, tx_id=tx_id),
                    request_review("charge", 1, tx_id=tx_id),
                ]
            log = log_of(*inputs, tx_id=tx_id)
            await project_batch(
                conn, "recon.events", [(0, offset + i, e) for i, e in enumerate(log)]
            )
            offset += len(log)
        # The decider's clock is the builders' one (T0): spread the times so newest-first
        # and the time filters have something to order; tx-4 and tx-5 share one instant,
        # ordered then by tx_id.
        for n, tx_id in enumerate(TXS, start=1):
            at = T0 + timedelta(minutes=min(n, 4))
            agent = "agent-b" if n % 2 == 0 else "agent-a"
            await conn.execute(
                "UPDATE transactions SET created_at = $3, agent_id = $4"
                " WHERE tenant = $1 AND tx_id = $2",
                "demo",
                tx_id,
                at,
                agent,
            )
        found = [
            DriftDetected(
                drift_id=drift_id(DriftKind.EFFECT_WITHOUT_INTENT, "sandbox", f"ch_{n}"),
                kind=DriftKind.EFFECT_WITHOUT_INTENT,
                provider="sandbox",
                tenant="demo",
                effect_id=f"ch_{n}",
                detail={"n": n},
                detected_at=(T0 + timedelta(seconds=n)).isoformat(),
            )
            for n in range(3)
        ]
        await project_drift(conn, "recon.drift", [(0, i, d) for i, d in enumerate(found)])
    finally:
        await conn.close()


@pytest.fixture
async def http(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    await _seed(settings.database_url)
    async with intake_client(settings) as client:
        yield client


async def _pages(
    http: httpx.AsyncClient, path: str, field: str, params: dict[str, Any]
) -> list[list[Any]]:
    """Every page of a list, following next_cursor."""
    pages: list[list[Any]] = []
    cursor = None
    while True:
        answer = await http.get(
            path, params={**params, **({"cursor": cursor} if cursor else {})}, headers=DEMO
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        pages.append(body[field])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


def _ids(pages: list[list[Any]], key: str = "tx_id") -> list[Any]:
    return [row[key] for page in pages for row in page]


async def test_transactions_are_listed_newest_first_page_by_page(
    http: httpx.AsyncClient,
) -> None:
    pages = await _pages(http, "/v1/transactions", "transactions", {"limit": 2})
    assert [len(p) for p in pages] == [2, 2, 1]
    assert _ids(pages) == ["tx-5", "tx-4", "tx-3", "tx-2", "tx-1"]
    first = pages[-1][0]
    assert first["status"] == "manual_review" and first["agent_id"] == "agent-a"
    assert first["operations"] == [
        {"action": "charge", "provider": "sandbox", "operation": "payments.charge",
         "state": "manual_review"}
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status": "manual_review"}, ["tx-2", "tx-1"]),
        ({"agent_id": "agent-b"}, ["tx-4", "tx-2"]),
        ({"operation": "email.send"}, ["tx-2"]),
        ({"provider": "sandbox", "status": "running"}, ["tx-5", "tx-4", "tx-3"]),
        ({"provider": "stripe"}, []),
        (
            {
                "created_after": (T0 + timedelta(minutes=2)).isoformat(),
                "created_before": (T0 + timedelta(minutes=4)).isoformat(),
            },
            ["tx-3", "tx-2"],
        ),
    ],
)
async def test_each_filter_narrows_the_list_and_pages_keep_it(
    http: httpx.AsyncClient, params: dict[str, Any], expected: list[str]
) -> None:
    assert _ids(await _pages(http, "/v1/transactions", "transactions", params)) == expected
    one_by_one = await _pages(http, "/v1/transactions", "transactions", {**params, "limit": 1})
    assert _ids(one_by_one) == expected


async def test_another_tenant_lists_nothing_and_cannot_use_a_cursor(
    http: httpx.AsyncClient,
) -> None:
    answer = await http.get("/v1/transactions", params={"limit": 2}, headers=DEMO)
    cursor = answer.json()["next_cursor"]
    other = await http.get("/v1/transactions", headers=OTHER)
    assert other.json() == {"transactions": [], "next_cursor": None}
    assert (await http.get("/v1/reviews", headers=OTHER)).json()["reviews"] == []
    stolen = await http.get("/v1/transactions", params={"cursor": cursor}, headers=OTHER)
    assert stolen.status_code == 422 and stolen.json()["error"] == "invalid_cursor"


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/transactions", {"status": "running"}),  # other filters than the cursor's
        ("/v1/reviews", {}),  # another list's cursor
        ("/v1/transactions", {"tamper": True}),
        ("/v1/transactions", {"cursor": "not-a-cursor"}),
    ],
)
async def test_a_cursor_is_refused_off_its_list_tenant_and_filters(
    http: httpx.AsyncClient, path: str, params: dict[str, Any]
) -> None:
    made = await http.get("/v1/transactions", params={"limit": 1}, headers=DEMO)
    cursor = made.json()["next_cursor"]
    if params.pop("tamper", False):
        body, _, mac = cursor.partition(".")
        cursor = f"{body[:-2]}AA.{mac}"
    params.setdefault("cursor", cursor)
    answer = await http.get(path, params=params, headers=DEMO)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "invalid_cursor"


@pytest.mark.parametrize("value", ["0.5", "1764700000", "yesterday"])
async def test_a_time_filter_is_an_iso_time_not_a_number(
    http: httpx.AsyncClient, value: str
) -> None:
    # pydantic alone reads 0.5 as Unix time (1970) and lists everything before it.
    answer = await http.get("/v1/transactions", params={"created_before": value}, headers=DEMO)
    assert answer.status_code == 422, answer.text


async def test_reviews_drift_and_events_pages_give_every_row_once(
    http: httpx.AsyncClient,
) -> None:
    for path, field, key in (
        ("/v1/reviews", "reviews", "id"),
        ("/v1/drift", "drift", "id"),
        ("/v1/transactions/tx-1/events", "events", "seq"),
    ):
        whole = await _pages(http, path, field, {})
        assert len(whole) == 1 and len(whole[0]) >= 2, f"{path}: one page by default"
        paged = await _pages(http, path, field, {"limit": 1})
        assert len(paged) == len(whole[0]), path
        assert _ids(paged, key) == _ids(whole, key), path


async def test_the_sdk_reads_pages(http: httpx.AsyncClient) -> None:
    async with AsyncRecon("http://intake", api_key="key-demo", http=http) as recon:
        page = await recon.transactions(agent_id="agent-a", limit=2)
        assert [t.tx_id for t in page.transactions] == ["tx-5", "tx-3"]
        rest = await recon.transactions(agent_id="agent-a", limit=2, cursor=page.next_cursor)
        assert [t.tx_id for t in rest.transactions] == ["tx-1"] and rest.next_cursor is None
        events = await recon.events("tx-1")
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert len(await recon.drift()) == 3
        assert len(await recon.reviews(state="open")) == 2
