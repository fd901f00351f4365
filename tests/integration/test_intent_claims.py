"""services.intake.intent_claims against a real Postgres: submissions that reach their
first statement at the same time share it, and each still gets its own statement's answer:
a new tx_id its row and keys, a second body of a tx_id asked in the same batch the 409 (not
a 202 over the first body's row), a retry of a body in the same batch its operations, an
intent checked under a policy no longer in force PolicyMoved with nothing written, and a
body holding text Postgres cannot store its own 422's error without failing the others."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
import pytest
from support.txbuilders import submit

from services.intake import intents
from services.intake.errors import ApiError
from services.intake.intent_claims import IntentClaims
from services.intake.intents import Intent, PolicyMoved, Recorded
from services.pg_pool import create_pool

TENANT = "demo"


def _intent(tx_id: str, fingerprint: str = "f", **fields: Any) -> Intent:
    operations = submit(["reserve", "charge"], ("email",), tx_id=tx_id).operations
    return Intent(TENANT, tx_id, fingerprint * 64, "agent-1", operations, **fields)


@pytest.fixture
async def pool(fresh_database: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(fresh_database, min_size=1, max_size=2)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The tx_ids of each record_new statement run."""
    run: list[list[str]] = []
    record_new = intents.record_new

    async def counted(conn: asyncpg.Connection, asked: Sequence[Intent]) -> list[Recorded]:
        run.append([intent.tx_id for intent in asked])
        return await record_new(conn, asked)

    monkeypatch.setattr(intents, "record_new", counted)
    return run


async def _outcome(claims: IntentClaims, intent: Intent) -> object:
    try:
        return await claims.claim(intent, horizon_s=30)
    except (ApiError, PolicyMoved, asyncpg.DataError) as exc:
        return exc


async def test_claims_arriving_together_share_a_statement_with_their_own_answers(
    pool: asyncpg.Pool, batches: list[list[str]]
) -> None:
    claims = IntentClaims(pool)
    new = [_intent(f"tx-{n}") for n in range(4)]
    retry = _intent("tx-0")  # the same body again, while its first ask is being recorded
    other_body = _intent("tx-1", fingerprint="e")
    moved = _intent("tx-4", policy_stamp="1:" + "d" * 64)  # no policy is in force

    outcomes = await asyncio.gather(
        *(_outcome(claims, i) for i in [*new, retry, other_body, moved])
    )

    assert outcomes[:5] == [i.operations for i in [*new, retry]]
    assert isinstance(outcomes[5], ApiError) and outcomes[5].code == "tx_pending"
    assert isinstance(outcomes[6], PolicyMoved)
    # Every ask was waiting when the first statement ran: one statement, each tx_id once.
    assert batches == [["tx-0", "tx-1", "tx-2", "tx-3", "tx-4"]]
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT tx_id, fingerprint FROM intents ORDER BY tx_id")
        keys = await conn.fetch("SELECT tx_id, count(*) FROM intent_keys GROUP BY 1 ORDER BY 1")
    assert [(r["tx_id"], r["fingerprint"]) for r in rows] == [(i.tx_id, "f" * 64) for i in new]
    # reserve and charge with their compensations, and the email: five keys each.
    assert [(r["tx_id"], r["count"]) for r in keys] == [(i.tx_id, 5) for i in new]


async def test_a_body_postgres_cannot_store_fails_only_its_own_claim(
    pool: asyncpg.Pool, batches: list[list[str]]
) -> None:
    claims = IntentClaims(pool)
    fine = [_intent(f"tx-{n}") for n in range(3)]
    nul = Intent(TENANT, "tx-nul", "f" * 64, "agent-\x00", fine[0].operations)

    outcomes = await asyncio.gather(*(_outcome(claims, i) for i in [fine[0], nul, *fine[1:]]))

    assert isinstance(outcomes[1], asyncpg.DataError)
    assert [outcomes[0], *outcomes[2:]] == [i.operations for i in fine]
    # The shared statement failed; each then ran alone.
    assert batches[0] == ["tx-0", "tx-nul", "tx-1", "tx-2"]
    assert sorted(map(tuple, batches[1:])) == [("tx-0",), ("tx-1",), ("tx-2",), ("tx-nul",)]
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT tx_id FROM intents ORDER BY tx_id")
    assert [r["tx_id"] for r in rows] == ["tx-0", "tx-1", "tx-2"]
