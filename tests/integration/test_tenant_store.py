"""A TenantStore bound to one tenant never returns another tenant's rows, for every read it
has (services.intake.tenant_store), on a real Postgres with the projection schema.

Tenant `demo` owns a projected transaction (a confirmed step with its resource, a step under
an open review, the saga's log), an accepted intent the projector has not reached yet, and
drift about its operation; a drift report belongs to no tenant. A store bound to `other`
asks each read with demo's ids and finds nothing, exactly as for ids that do not exist; a
store bound to `demo` finds each (so no case passes for want of data).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
from support.txbuilders import log_of, observed, request_review, spec, submit

from events.drift import DriftDetected, DriftKind, drift_id
from events.inputs import Outcome
from events.keys import review_id
from projections.writer import project_batch, project_drift
from services.intake import intents
from services.intake.tenant_store import TenantStore, unowned_drift

OWNER, OTHER = "demo", "other"  # txbuilders' events are tenant demo's
CHARGE = spec("charge")
REVIEW = review_id(OWNER, "tx-1", "charge", "forward", 1)
UNOWNED = drift_id(DriftKind.EFFECT_WITHOUT_INTENT, "sandbox", "ch_stray")


@pytest.fixture
async def conn(fresh_database: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(fresh_database)
    try:
        await _seed(connection)
        yield connection
    finally:
        await connection.close()


async def _seed(conn: asyncpg.Connection) -> None:
    submission = submit(["reserve", "charge"])
    for tx_id in ("tx-1", "tx-2"):  # tx-2: accepted, not projected yet
        intent = intents.Intent(OWNER, tx_id, "f" * 64, "agent-1", submission.operations)
        await intents.claim(conn, intent, horizon_s=30)
        await intents.mark_produced(conn, intent)
    log = log_of(
        submission,
        observed("reserve", 1, Outcome.SUCCEEDED, n=0),
        observed("charge", 1, Outcome.UNKNOWN, n=1),
        request_review("charge", 1),
    )
    await project_batch(conn, "recon.events", [(0, i, env) for i, env in enumerate(log)])
    owned = DriftDetected(
        drift_id=drift_id(DriftKind.MISMATCH, "sandbox", CHARGE.op_key),
        kind=DriftKind.MISMATCH,
        provider="sandbox",
        tenant=OWNER,
        tx_id="tx-1",
        action="charge",
        op_key=CHARGE.op_key,
        effect_id="ch_charge",
        detail={"field": "amount", "recon": 100, "provider": 200},
        detected_at="2026-01-01T00:00:00+00:00",
    )
    stray = DriftDetected(
        drift_id=UNOWNED,
        kind=DriftKind.EFFECT_WITHOUT_INTENT,
        provider="sandbox",
        effect_id="ch_stray",
        detail={"effect": {"id": "ch_stray"}},
        detected_at="2026-01-01T00:00:01+00:00",
    )
    await project_drift(conn, "recon.drift", [(0, 0, owned), (0, 1, stray)])


def _some(*answers: object) -> list[object]:
    """The answers that found something (None is "no such row", False "none held")."""
    return [a for a in answers if a is not None and a is not False]


async def _transaction(s: TenantStore) -> list[object]:
    return _some(await s.transaction("tx-1"), await s.transaction("tx-2"))


async def _produced_intent(s: TenantStore) -> list[object]:
    return _some(await s.produced_intent("tx-1"), await s.produced_intent("tx-2"))


async def _events(s: TenantStore) -> list[object]:
    # [] (accepted, nothing projected yet) is an answer too: it tells the tx_id exists.
    return _some(await s.events("tx-1"), await s.events("tx-2"))


async def _projected_state(s: TenantStore) -> list[object]:
    return _some(await s.projected_state("tx-1"))


async def _proposal_digest(s: TenantStore) -> list[object]:
    return _some(await s.proposal_digest("tx-1"))


async def _sessions(s: TenantStore) -> list[object]:
    return _some(await s.sessions("tx-1"))


async def _operation_of(s: TenantStore) -> list[object]:
    return _some(await s.operation_of("tx-1", CHARGE.action))


async def _operation(s: TenantStore) -> list[object]:
    return _some(await s.operation(CHARGE.op_key), await s.operation(CHARGE.compensation_key or ""))


async def _step(s: TenantStore) -> list[object]:
    # By op key here; by approval id in test_approval_revocation (a recorded approval).
    return _some(await s.step(CHARGE.op_key))


async def _operations_on(s: TenantStore) -> list[object]:
    return list(await s.operations_on("ch_reserve"))


async def _reviews(s: TenantStore) -> list[object]:
    found: list[object] = []
    for state in (None, "open"):
        found += await s.reviews(state=state, created_before=None)
    return found


async def _transactions(s: TenantStore) -> list[object]:
    return list(await s.transactions()) + list(await s.transactions(provider="sandbox"))


async def _attention(s: TenantStore) -> list[object]:
    counted = await s.attention()
    return [counted] if counted["reviews_open"] or counted["unknown"] else []


async def _review(s: TenantStore) -> list[object]:
    return _some(await s.review(REVIEW))


async def _review_state(s: TenantStore) -> list[object]:
    return _some(await s.review_state(REVIEW))


async def _drift(s: TenantStore) -> list[object]:
    # The drift that belongs to no tenant is every tenant's to see (redacted by the route).
    return [row for row in await s.drift() if row["tenant"] is not None]


READS: dict[str, Callable[[TenantStore], Awaitable[list[object]]]] = {
    "transaction": _transaction,
    "produced_intent": _produced_intent,
    "events": _events,
    "projected_state": _projected_state,
    "proposal_digest": _proposal_digest,
    "sessions": _sessions,
    "operation_of": _operation_of,
    "operation": _operation,
    "step": _step,
    "operations_on": _operations_on,
    "reviews": _reviews,
    "transactions": _transactions,
    "attention": _attention,
    "review": _review,
    "review_state": _review_state,
    "drift": _drift,
}


def test_every_read_of_the_store_is_asked() -> None:
    methods = {
        name
        for name, member in inspect.getmembers(TenantStore, inspect.iscoroutinefunction)
        if not name.startswith("_")
    }
    assert methods == set(READS), "a new TenantStore read needs its case in READS"


@pytest.mark.parametrize("read", sorted(READS))
async def test_a_store_never_returns_another_tenants_rows(
    conn: asyncpg.Connection, read: str
) -> None:
    assert await READS[read](TenantStore(conn, OWNER)), f"{read}: the owner finds its rows"
    assert await READS[read](TenantStore(conn, OTHER)) == [], f"{read} crossed tenants"


async def test_the_drift_of_no_tenant_is_shown_to_every_tenant_and_alone_to_the_admin(
    conn: asyncpg.Connection,
) -> None:
    owners = {row["drift_id"]: row["tenant"] for row in await TenantStore(conn, OWNER).drift()}
    others = {row["drift_id"]: row["tenant"] for row in await TenantStore(conn, OTHER).drift()}
    admin = {row["drift_id"]: row["tenant"] for row in await unowned_drift(conn)}
    assert owners[UNOWNED] is None and OWNER in owners.values()
    assert others == admin == {UNOWNED: None}
