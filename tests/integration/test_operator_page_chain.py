"""The console's approval page reads what it shows (the proposal's digest, to find its
preview, and the step) from the transaction's accepted event and its projected rows, not
from the decider's fold of the whole chain, which an agent can grow to its cap and so make
every operator's look at the step dearer (docs/benchmark.md, "An operator's request and its
transaction's chain"). Against the real intake (in-process, over ASGI) and Postgres written
by the projector's own statement."""

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from support.intake_app import intake_client, settings_fixture
from support.txbuilders import log_of
from test_known_transaction import _session_inputs

from projections.writer import project_batch
from services.config import Operator, Settings
from services.intake.preview_store import store_preview
from services.intake.tenant_store import TenantStore

settings = settings_fixture(
    api_keys={"key-demo": "demo"}, operator_keys={"ops-demo": Operator("demo", "ops")}
)
DIGEST = "d" * 64


@pytest.fixture
async def console(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A logged-in operator's console, and tx-1 projected with its chain at the session
    cap and a preview of its proposal stored; the proposal's digest."""
    conn = await asyncpg.connect(settings.database_url)
    try:
        records = [(0, i, env) for i, env in enumerate(log_of(*_session_inputs()))]
        await project_batch(conn, "recon.events", records)
        store = TenantStore(conn, "demo")
        state = await store.projected_state("tx-1")
        assert state is not None and state.session_events > 256
        await store_preview(store, "pv-1", "tx-1", state.fingerprint, DIGEST, {"steps": []})
    finally:
        await conn.close()
    async with intake_client(settings) as http:
        login = await http.post("/console/login", data={"key": "ops-demo"})
        assert login.status_code == 303, login.text
        yield http, state.fingerprint


async def test_the_approval_page_finds_the_preview_of_the_accepted_proposal(
    console: tuple[httpx.AsyncClient, str], settings: Settings
) -> None:
    http, fingerprint = console
    conn = await asyncpg.connect(settings.database_url)
    try:
        assert await TenantStore(conn, "demo").proposal_digest("tx-1") == fingerprint
        shown = await http.get("/console/approvals/tx-1/charge")
        assert shown.status_code == 200 and DIGEST in shown.text, shown.text
        # Every event after the accepted one made unreadable: a page that folded the chain
        # could no longer be drawn; one that reads the accepted event and the rows is.
        await conn.execute("UPDATE events SET data = '{}' WHERE tx_id = 'tx-1' AND seq > 1")
        again = await http.get("/console/approvals/tx-1/charge")
    finally:
        await conn.close()
    assert again.status_code == 200 and again.text == shown.text, again.text


async def test_a_step_the_transaction_does_not_have_is_missing(
    console: tuple[httpx.AsyncClient, str],
) -> None:
    http, _ = console
    assert (await http.get("/console/approvals/tx-1/refund")).status_code == 404
    assert (await http.get("/console/approvals/tx-2/charge")).status_code == 404
