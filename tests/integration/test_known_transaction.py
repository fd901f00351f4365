"""What the intake judges a session's command on (services.intake.ownership.known_transaction)
against a real Postgres written by the projector's own statement: the owner and the count
of commands from agent sessions the decider's fold of the chain gives, read from the
transaction's row in one primary-key read whatever the chain's length; and from the chain
itself when the row's were not projected (a row from before migration 0014) or a projector
of the previous release moved the row on without them."""

from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
from support.txbuilders import T0, log_of, submit

from events.inputs import ClaimTransaction, DeciderInput, ReleaseTransaction
from projections.writer import project_batch
from services.intake.ownership import Known, known_transaction
from services.intake.tenant_store import TenantStore
from transactions.input_bounds import MAX_SESSION_EVENTS

LEASE_S = 300


def _session_inputs() -> list[DeciderInput]:
    """s-0 owns it; s-1 takes it over once the lease lapsed; then the cap's worth of fresh
    sessions claim while s-1's lease holds, each refused `lease_held` on the chain."""
    first = submit(["charge"]).model_copy(update={"session_id": "s-0", "lease_s": LEASE_S})
    at = T0 + timedelta(seconds=LEASE_S + 1)
    inputs: list[DeciderInput] = [
        first,
        ClaimTransaction(
            message_id="take",
            tenant="demo",
            tx_id="tx-1",
            agent_id="agent-1",
            session_id="s-1",
            lease_s=LEASE_S,
            issued_at=at,
        ),
    ]
    inputs += [
        ClaimTransaction(
            message_id=f"c{i}",
            tenant="demo",
            tx_id="tx-1",
            agent_id="agent-2",
            session_id=f"s-fresh-{i}",
            lease_s=LEASE_S,
            issued_at=at,
        )
        for i in range(MAX_SESSION_EVENTS)
    ]
    inputs.append(
        ReleaseTransaction(
            message_id="hand-off",
            tenant="demo",
            tx_id="tx-1",
            agent_id="agent-1",
            session_id="s-1",
            issued_at=at,
        )
    )
    return inputs


@pytest.fixture
async def conn(fresh_database: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(fresh_database)
    try:
        records = [(0, i, env) for i, env in enumerate(log_of(*_session_inputs()))]
        # Batches of 100: each later one folds on the view the projector reads back from
        # the row, as a projector does after a restart or a rebalance.
        for at in range(0, len(records), 100):
            await project_batch(connection, "recon.events", records[at : at + 100])
        await connection.execute(
            "INSERT INTO intents (tenant, tx_id, fingerprint, agent_id, operations, produced)"
            " VALUES ('demo', 'tx-1', 'fp', 'agent-1', '[]', true)"
        )
        yield connection
    finally:
        await connection.close()


async def _decided(conn: asyncpg.Connection) -> Known:
    """What the decider's own fold of the projected chain gives."""
    state = await TenantStore(conn, "demo").projected_state("tx-1")
    assert state is not None and state.status is not None
    return Known(state.status, state.owner, (), state.session_events)


async def test_a_sessions_command_is_judged_on_the_row_as_the_chain_folds(
    conn: asyncpg.Connection,
) -> None:
    decided = await _decided(conn)
    assert decided.owner is not None and decided.owner.released
    assert decided.session_events == MAX_SESSION_EVENTS + 2  # the take, the refusals, the hand-off

    assert await known_transaction(TenantStore(conn, "demo"), "tx-1", LEASE_S) == decided
    # From the row: the chain is not read.
    await conn.execute("DELETE FROM events WHERE tx_id = 'tx-1'")
    assert await known_transaction(TenantStore(conn, "demo"), "tx-1", LEASE_S) == decided


async def test_a_row_from_before_its_owner_was_projected_is_judged_on_the_chain(
    conn: asyncpg.Connection,
) -> None:
    decided = await _decided(conn)
    await conn.execute(
        "UPDATE transactions SET owner = NULL, session_events = NULL, session_seq = NULL"
    )

    assert await known_transaction(TenantStore(conn, "demo"), "tx-1", LEASE_S) == decided


async def test_a_row_the_previous_release_moved_on_is_judged_on_the_chain(
    conn: asyncpg.Connection,
) -> None:
    decided = await _decided(conn)
    # The previous release's projector wrote the hand-off: last_seq moved, the session
    # columns kept what they held before it (s-1's lease, one event fewer).
    await conn.execute(
        "UPDATE transactions SET session_events = session_events - 1,"
        " owner = owner - 'released', session_seq = last_seq - 1"
    )

    assert await known_transaction(TenantStore(conn, "demo"), "tx-1", LEASE_S) == decided
