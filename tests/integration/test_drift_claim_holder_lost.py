"""A drift claim whose holder stops without closing its connection (reconcilers.store.
claiming_reports, CLAIM_IDLE_BOUND_S). A killed process's socket is closed by its kernel
and Postgres rolls its claim back at once (tests/fault/test_drift_claim_crash.py); a host
lost, a network cut or a frozen process leaves the socket open, the claim's transaction
idle, and the row's lock held until the kernel's keepalive gives up on the peer (about two
hours). Every other reporter of the id waits at that lock meanwhile. Postgres ends the
holder's session once its claim sat idle past the bound, and the waiting reporter then
reports the drift: as after a crash before the commit. Real Postgres; the holder's stop is
a connection that sends nothing more, which is all Postgres can see of one."""

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest
from support.holder_stopped import Stop, connections, holder_stopped

from reconcilers import store

BOUND_S = 1.0
REPORT = ("dr_holder_lost", "effect_without_intent", datetime(2026, 12, 6, tzinfo=UTC))


@pytest.fixture
async def conns(fresh_database: str) -> AsyncIterator[list[asyncpg.Connection]]:
    async with connections(fresh_database, 2) as opened:
        yield opened


async def test_a_claim_whose_holder_stopped_is_let_go_within_its_bound(
    conns: list[asyncpg.Connection],
) -> None:
    stopped, other = conns

    async def holder(stop: Stop) -> None:
        async with store.claiming_reports(stopped, [REPORT], idle_bound_s=BOUND_S) as claimed:
            assert claimed == {REPORT[0]}
            await stop()

    async with holder_stopped(holder):
        waited = time.monotonic()
        async with asyncio.timeout(10 * BOUND_S):
            async with store.claiming_reports(other, [REPORT]) as claimed:
                # The stopped holder's claim was rolled back: this reporter reports it.
                assert claimed == {REPORT[0]}
        assert time.monotonic() - waited < 5 * BOUND_S
        assert await other.fetchval("SELECT count(*) FROM reconciler_drift_reported") == 1
        # And the bound was the claim's transaction's only: the connection is as it was.
        assert await other.fetchval("SHOW idle_in_transaction_session_timeout") == "0"


async def test_a_claims_idle_bound_is_more_than_nothing_and_at_most_an_hour(
    conns: list[asyncpg.Connection],
) -> None:
    for wrong in (0.0, -1.0, 3601.0):
        with pytest.raises(ValueError, match="idle bound"):
            async with store.claiming_reports(conns[0], [REPORT], idle_bound_s=wrong):
                pass
    assert await conns[0].fetchval("SELECT count(*) FROM reconciler_drift_reported") == 0
