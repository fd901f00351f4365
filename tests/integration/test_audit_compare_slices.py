"""`audit rebuild --compare` holds one slice of each side at a time, never a whole database
(services.cli.audit_compare_slices), and finds what a compare of the whole found, printed
in the same order: a difference deep in a table, past the first slice and the first page
of keys; in the last part of a transaction longer than a slice; a review whose two rows
came in different slices. Real Postgres, two databases holding the same projection, small
slices so that a few dozen transactions make many of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest
from conftest import Infra, new_database
from support.txbuilders import log_of, observed, request_review, submit

from events.envelope import Envelope
from events.inputs import Outcome, Source
from events.topics import Topics
from projections.writer import project_batch
from services.cli.audit_compare import Held, compare
from services.cli.audit_compare_slices import SliceSize
from services.config import Settings

TRANSACTIONS = 40
# 12 events and 3 transactions a slice (of 4 events each here), 3 keys a page: fifteen
# slices or more.
SMALL = SliceSize(events=12, transactions=3)
# The most rows one slice holds, both sides: its events, and its transactions with their
# operations (3 each here) and tx-review's one review.
MOST_HELD = 2 * (SMALL.events + SMALL.transactions * (1 + 3) + 1)


def _transactions() -> list[list[Envelope]]:
    """tx-000 .. tx-039 (4 events each), tx-review with an open review (5 events), and
    tx-webhooks, whose 30 repeated webhooks make 33 events: longer than a slice."""
    logs = [
        log_of(
            submit(["reserve", "charge"], ("receipt",), tx_id=f"tx-{i:03d}"),
            observed("reserve", 1, Outcome.SUCCEEDED, tx_id=f"tx-{i:03d}"),
            tx_id=f"tx-{i:03d}",
        )
        for i in range(TRANSACTIONS)
    ]
    logs.append(
        log_of(
            submit(["reserve", "charge"], tx_id="tx-review"),
            observed("reserve", 1, Outcome.UNKNOWN, tx_id="tx-review"),
            request_review("reserve", 1, tx_id="tx-review"),
            tx_id="tx-review",
        )
    )
    webhooks = [
        observed("reserve", 1, Outcome.SUCCEEDED, n=n, source=Source.WEBHOOK, tx_id="tx-webhooks")
        for n in range(30)
    ]
    logs.append(
        log_of(submit(["reserve", "charge"], tx_id="tx-webhooks"), *webhooks, tx_id="tx-webhooks")
    )
    return logs


async def _project(url: str, topic: str, logs: Sequence[list[Envelope]]) -> None:
    records = [env for log in logs for env in log]
    conn = await asyncpg.connect(url)
    try:
        await project_batch(conn, topic, [(0, i, env) for i, env in enumerate(records)], bulk=True)
    finally:
        await conn.close()


@pytest.fixture
async def two_sides(
    infra: Infra, fresh_database: str, topic_prefix: str
) -> AsyncIterator[tuple[Settings, str]]:
    """The live database's settings and a rebuilt database's URL, both holding the same
    projection."""
    async with new_database(infra, template=infra.template) as rebuilt_url:
        for url in (fresh_database, rebuilt_url):
            await _project(url, Topics(topic_prefix).events, _transactions())
        yield Settings("unused:9092", fresh_database, Topics(topic_prefix), "dev"), rebuilt_url


async def _compare(settings: Settings, rebuilt_url: str, held: Held) -> list[str]:
    conn = await asyncpg.connect(rebuilt_url)
    try:
        return await compare(settings, conn, 1, size=SMALL, held=held)
    finally:
        await conn.close()


async def _execute(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(";".join(statements))
    finally:
        await conn.close()


async def test_a_difference_past_the_first_slice_is_found_holding_one_slice_at_a_time(
    two_sides: tuple[Settings, str],
) -> None:
    settings, rebuilt_url = two_sides
    held = Held()
    assert await _compare(settings, rebuilt_url, held) == []
    # What the promise is about: the rows held at once. Of all it read (both sides), never
    # more than one slice.
    print(f"agreeing: {held}")
    assert held.slices >= 15, held
    assert held.rows > 600, held
    assert held.most_rows <= MOST_HELD, held

    # Deep in the tables (the last transactions in key order, past the first page of keys),
    # and two in one slice, found and printed table by table, each in key order.
    await _execute(
        rebuilt_url,
        "UPDATE events SET data = data || '{\"amended\": true}' WHERE tx_id = 'tx-038' AND seq = 4",
        "DELETE FROM operations WHERE tx_id = 'tx-037' AND action = 'receipt'",
        "UPDATE transactions SET agent_id = 'agent-9' WHERE tx_id = 'tx-039'",
    )
    differences = await _compare(settings, rebuilt_url, Held())
    assert differences[0] == "transactions demo/tx-039: agent_id: live 'agent-1', rebuilt 'agent-9'"
    assert differences[1] == (
        "operations demo/tx-037/receipt: in the live database, missing from the rebuild"
    )
    assert differences[2].startswith("events demo/tx-038/4: data: live {"), differences
    assert "'amended': True" in differences[2] and len(differences) == 3, differences


async def test_the_last_part_of_a_transaction_longer_than_a_slice_is_compared(
    two_sides: tuple[Settings, str],
) -> None:
    settings, rebuilt_url = two_sides
    await _execute(rebuilt_url, "DELETE FROM events WHERE tx_id = 'tx-webhooks' AND seq = 33")
    held = Held()
    differences = await _compare(settings, rebuilt_url, held)
    assert differences == [
        "events demo/tx-webhooks/33: in the live database, missing from the rebuild"
    ]
    # Its 33 events came in parts of 12, never all at once.
    assert held.most_rows <= MOST_HELD, held


async def test_a_review_under_another_transaction_on_one_side_is_named_by_its_columns(
    two_sides: tuple[Settings, str],
) -> None:
    # Its two rows come in different slices (tx-000's and tx-review's); a compare of the
    # whole paired them by their id and named the column that differs.
    settings, rebuilt_url = two_sides
    await _execute(settings.database_url, "UPDATE reviews SET tx_id = 'tx-000'")
    differences = await _compare(settings, rebuilt_url, Held())
    assert len(differences) == 1, differences
    assert differences[0].startswith("reviews "), differences
    assert differences[0].endswith(": tx_id: live 'tx-000', rebuilt 'tx-review'"), differences


async def test_a_transactions_owner_and_session_count_are_compared(
    two_sides: tuple[Settings, str],
) -> None:
    # What the intake judges a session's command on (migration 0014): a count or an owner
    # the live projector got wrong is a difference like any other column's, and so is a
    # live row from before they were projected, which a rebuild writes in full.
    settings, rebuilt_url = two_sides
    await _execute(
        settings.database_url,
        "UPDATE transactions SET session_events = 7 WHERE tx_id = 'tx-001'",
        "UPDATE transactions SET owner = NULL, session_events = NULL, session_seq = NULL"
        " WHERE tx_id = 'tx-002'",
        "UPDATE transactions SET owner = '{\"agent_id\": \"agent-1\"}' WHERE tx_id = 'tx-003'",
    )
    differences = await _compare(settings, rebuilt_url, Held())
    assert differences == [
        "transactions demo/tx-001: session_events: live 7, rebuilt 0",
        "transactions demo/tx-002: session_events: live None, rebuilt 0",
        "transactions demo/tx-002: session_seq: live None, rebuilt 4",
        "transactions demo/tx-003: owner: live {'agent_id': 'agent-1'}, rebuilt None",
    ]
