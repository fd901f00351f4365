"""projections.writer against a real Postgres: a batch is applied exactly once, whole or
not at all, with its offsets."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from support.txbuilders import log_of, observed, request_review, resolve, submit

from events.definition import Resolution
from events.drift import DriftDetected, DriftKind, drift_id
from events.envelope import Envelope
from events.inputs import Outcome, Source
from events.keys import review_id
from projections.offsets import load_offsets
from projections.view_cache import ViewCache
from projections.writer import Record, project_batch, project_drift

TOPIC = "recon.events"


def as_records(log: list[Envelope], partition: int = 0, first_offset: int = 0) -> list[Record]:
    return [(partition, first_offset + i, env) for i, env in enumerate(log)]


async def snapshot(conn: asyncpg.Connection) -> dict[str, list[dict[str, Any]]]:
    return {
        table: [dict(row) for row in await conn.fetch(f"SELECT * FROM {table} ORDER BY 1, 2, 3")]
        for table in ("events", "transactions", "operations", "projection_offsets")
    }


async def test_a_batch_projected_twice_leaves_the_same_rows(conn: asyncpg.Connection) -> None:
    log = log_of(
        submit(["reserve", "charge"], ("receipt",)),
        observed("reserve", 1, Outcome.SUCCEEDED, n=0),
        observed("charge", 1, Outcome.UNKNOWN, n=1),
        observed("charge", 1, Outcome.SUCCEEDED, n=2, source=Source.LOOKUP),
    )
    records = as_records(log, partition=2, first_offset=7)

    await project_batch(conn, TOPIC, records)
    first = await snapshot(conn)
    await project_batch(conn, TOPIC, records)

    assert await snapshot(conn) == first
    assert await load_offsets(conn, TOPIC) == {2: 7 + len(log)}
    assert [row["seq"] for row in first["events"]] == list(range(1, len(log) + 1))
    tx = first["transactions"][0]
    assert (tx["status"], tx["last_seq"]) == ("committed", len(log))
    ops = {row["action"]: row for row in first["operations"]}
    assert {a: (r["state"], r["attempts"]) for a, r in ops.items()} == {
        "reserve": ("confirmed", 1),
        "charge": ("confirmed", 1),
        "receipt": ("dispatched", 1),
    }
    assert '"OperationUnknown"' in ops["charge"]["evidence"]


async def test_records_below_the_stored_offset_are_not_applied_again(
    conn: asyncpg.Connection,
) -> None:
    # Offsets reset to zero (a redelivery after a rebalance) must not move state back or
    # duplicate evidence, even when the view alone would not tell.
    log = log_of(submit(["charge"]), observed("charge", 1, Outcome.UNKNOWN))
    await project_batch(conn, TOPIC, as_records(log))
    before = await snapshot(conn)

    await project_batch(conn, TOPIC, as_records(log[:1]))

    assert await snapshot(conn) == before


async def test_a_batch_split_across_calls_equals_one_batch(
    conn: asyncpg.Connection, fresh_database: str
) -> None:
    log = log_of(
        submit(["charge"], ("receipt",)),
        observed("charge", 1, Outcome.UNKNOWN, n=0),
        observed("charge", 1, Outcome.SUCCEEDED, n=1, source=Source.WEBHOOK),
    )
    records = as_records(log)

    for record in records:
        await project_batch(conn, TOPIC, [record])
    one_by_one = await snapshot(conn)
    await conn.execute("TRUNCATE events, transactions, operations, projection_offsets")
    await project_batch(conn, TOPIC, records)

    assert await snapshot(conn) == one_by_one


async def test_a_failing_batch_stores_nothing(conn: asyncpg.Connection) -> None:
    good = log_of(submit(["charge"]), tx_id="tx-1")
    other = log_of(submit(["charge"], tx_id="tx-2"), tx_id="tx-2")
    # The same event_id under another (tenant, tx_id, seq) is corruption, not a replay:
    # the events table's unique event_id must reject it and the whole batch with it.
    forged = other[0].model_copy(update={"event_id": good[0].event_id})
    records = [*as_records(good), (1, 0, forged)]

    with pytest.raises(asyncpg.UniqueViolationError):
        await project_batch(conn, TOPIC, records)

    assert await snapshot(conn) == {
        "events": [],
        "transactions": [],
        "operations": [],
        "projection_offsets": [],
    }


async def test_skipped_records_advance_the_offset(conn: asyncpg.Connection) -> None:
    log = log_of(submit(["charge"]))

    await project_batch(conn, TOPIC, as_records(log), skipped=[(0, 5), (3, 10)])

    assert await load_offsets(conn, TOPIC) == {0: 6, 3: 11}


async def test_two_projectors_owning_one_partition_apply_a_batch_once(
    conn: asyncpg.Connection, fresh_database: str
) -> None:
    # A rebalance can leave two projectors holding the same partition for a moment. The
    # offset row's lock serializes them: the second waits, then reads the offset the first
    # stored and applies nothing, so metrics count each transition once. A third
    # connection holds the lock first so that both are surely waiting at the same time.
    await project_batch(conn, TOPIC, [], skipped=[(0, 0)])  # the partition's row exists
    records = as_records(log_of(submit(["charge"]), observed("charge", 1, Outcome.UNKNOWN)), 0, 1)
    first, second = [await asyncpg.connect(fresh_database) for _ in range(2)]
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1 FROM projection_offsets FOR UPDATE")
            both = [asyncio.create_task(project_batch(c, TOPIC, records)) for c in (first, second)]
            await asyncio.sleep(0.5)
            assert not any(task.done() for task in both), "a projector ignored the offset lock"
        applied = [bool(moves.transactions) for moves in await asyncio.gather(*both)]
    finally:
        await first.close()
        await second.close()

    assert sorted(applied) == [False, True]
    assert await load_offsets(conn, TOPIC) == {0: 1 + len(records)}
    assert await conn.fetchval("SELECT count(*) FROM events") == len(records)


async def test_kept_views_are_not_used_after_another_projector_wrote_the_partition(
    conn: asyncpg.Connection, fresh_database: str
) -> None:
    # Projector A keeps its views in memory while it writes partition 0. B takes the
    # partition over (a rebalance, or A cut off for a while) and projects the next events,
    # among them the charge's unknown outcome. When A writes the partition again, the
    # offset row it locks no longer holds what A stored: A must read the views again, or
    # its stale view (without B's evidence) would overwrite B's rows.
    log = log_of(
        submit(["charge"], ("receipt",)),
        observed("charge", 1, Outcome.UNKNOWN, n=0),
        observed("charge", 1, Outcome.SUCCEEDED, n=1, source=Source.LOOKUP),
    )
    records = as_records(log)
    first, second = [await asyncpg.connect(fresh_database) for _ in range(2)]
    a, b = ViewCache(), ViewCache()
    try:
        await project_batch(first, TOPIC, records[:2], cache=a)
        await project_batch(second, TOPIC, records[2:4], cache=b)
        await project_batch(first, TOPIC, records[4:], cache=a)
    finally:
        await first.close()
        await second.close()
    by_turns = await snapshot(conn)
    await conn.execute("TRUNCATE events, transactions, operations, projection_offsets")
    await project_batch(conn, TOPIC, records)

    assert by_turns == await snapshot(conn)
    [charge] = [r for r in by_turns["operations"] if r["action"] == "charge"]
    assert '"OperationUnknown"' in charge["evidence"]


async def test_kept_views_spare_the_reads_and_write_the_same_rows(
    conn: asyncpg.Connection,
) -> None:
    # The live projector's path: batch after batch on its own partition, no view read
    # back once its transaction is known (a transaction starting in a batch is not read
    # either), and the rows are those of the uncached path.
    log = log_of(
        submit(["reserve", "charge"], ("receipt",)),
        observed("reserve", 1, Outcome.SUCCEEDED, n=0),
        observed("charge", 1, Outcome.UNKNOWN, n=1),
        observed("charge", 1, Outcome.SUCCEEDED, n=2, source=Source.LOOKUP),
    )
    records = as_records(log, partition=3)
    cache = ViewCache()
    sent: list[str] = []

    def log_query(query: asyncpg.connection.LoggedQuery) -> None:
        sent.append(query.query)

    conn.add_query_logger(log_query)
    for record in records:
        await project_batch(conn, TOPIC, [record], cache=cache)
    await asyncio.sleep(0)  # the logger's callbacks run on the loop
    conn.remove_query_logger(log_query)
    reads = [query for query in sent if query.startswith("SELECT * FROM")]  # _load_views
    cached = await snapshot(conn)
    await conn.execute("TRUNCATE events, transactions, operations, projection_offsets")
    await project_batch(conn, TOPIC, records)

    assert reads == []
    assert cached == await snapshot(conn)
    assert len(cache) == 1


def _three_outcomes_log() -> list[Envelope]:
    return log_of(
        submit(["charge"], ("receipt",)),
        observed("charge", 1, Outcome.UNKNOWN, n=0),
        observed("charge", 1, Outcome.SUCCEEDED, n=1, source=Source.LOOKUP),
    )


async def _in_one_batch(conn: asyncpg.Connection, records: list[Record]) -> dict[str, Any]:
    """The rows `records` leave when projected in one batch, from empty tables."""
    await conn.execute("TRUNCATE events, transactions, operations, projection_offsets")
    await project_batch(conn, TOPIC, records)
    return await snapshot(conn)


async def test_a_batch_on_kept_views_is_one_statement_and_yields_to_another_writer(
    conn: asyncpg.Connection, fresh_database: str
) -> None:
    # The live projector's usual batch is its one write statement, sent without locking
    # or reading first. When another projector wrote the partition in between, that
    # statement must write nothing (its offset check), and the batch goes the locked way,
    # reading the views again: A's kept view lacks B's evidence and would overwrite it.
    records = as_records(_three_outcomes_log())
    first, second = [await asyncpg.connect(fresh_database) for _ in range(2)]
    a = ViewCache()
    sent: list[str] = []

    def log_query(query: asyncpg.connection.LoggedQuery) -> None:
        sent.append(query.query)

    try:
        await project_batch(first, TOPIC, records[:1], cache=a)
        first.add_query_logger(log_query)
        await project_batch(first, TOPIC, records[1:2], cache=a)
        await asyncio.sleep(0)  # the logger's callbacks run on the loop
        alone = list(sent)
        await project_batch(second, TOPIC, records[2:3])  # the charge's unknown outcome
        sent.clear()
        await project_batch(first, TOPIC, records[3:], cache=a)  # moves the charge again
        await asyncio.sleep(0)
        after_b = list(sent)
    finally:
        await first.close()
        await second.close()
    by_turns = await snapshot(conn)

    [charge] = [r for r in by_turns["operations"] if r["action"] == "charge"]
    assert '"OperationUnknown"' in charge["evidence"]
    assert by_turns == await _in_one_batch(conn, records)
    assert len(alone) == 1 and alone[0].startswith("WITH held")
    assert after_b[0] == alone[0] and any(q.startswith("BEGIN") for q in after_b)


async def test_a_batch_on_kept_views_waiting_for_another_writer_sees_its_offsets(
    conn: asyncpg.Connection, fresh_database: str
) -> None:
    # B holds the partition's offset row (mid-batch, not yet committed) when A sends its
    # one statement: A waits for B, and must then judge by the offset B committed, not by
    # what its statement's snapshot saw before B committed (the lock re-reads the row).
    records = as_records(_three_outcomes_log())
    first, second = [await asyncpg.connect(fresh_database) for _ in range(2)]
    a = ViewCache()
    try:
        await project_batch(first, TOPIC, records[:1], cache=a)
        holding = second.transaction()
        await holding.start()
        await project_batch(second, TOPIC, records[1:3])  # its savepoint, in `holding`
        task = asyncio.create_task(project_batch(first, TOPIC, records[3:], cache=a))
        await asyncio.sleep(0.5)
        assert not task.done(), "a batch on kept views ignored the offset row's lock"
        await holding.commit()
        await task
    finally:
        await first.close()
        await second.close()

    assert await snapshot(conn) == await _in_one_batch(conn, records)


@pytest.mark.parametrize("cached", [False, True])
async def test_a_late_webhook_rewrites_only_the_operation_it_is_evidence_of(
    conn: asyncpg.Connection, cached: bool
) -> None:
    # A webhook for an effect already confirmed is evidence of one operation: the other
    # operations' rows (each with its whole evidence trail) are not written again, read
    # back (cached=False) or kept (True), and the rows equal a projection in one batch.
    log = log_of(
        submit(["reserve", "charge"], ("receipt",)),
        observed("reserve", 1, Outcome.SUCCEEDED, n=0),
        observed("charge", 1, Outcome.SUCCEEDED, n=1),
        observed("charge", 0, Outcome.SUCCEEDED, n=2, source=Source.WEBHOOK),
    )
    assert log[-1].type == "ObservationIgnored"
    records = as_records(log)
    cache = ViewCache() if cached else None
    await project_batch(conn, TOPIC, records[:-1], cache=cache)
    versions = "SELECT action, xmin::text AS version FROM operations ORDER BY action"
    before = {row["action"]: row["version"] for row in await conn.fetch(versions)}

    await project_batch(conn, TOPIC, records[-1:], cache=cache)

    after = {row["action"]: row["version"] for row in await conn.fetch(versions)}
    assert [a for a in after if after[a] != before[a]] == ["charge"]
    by_batches = await snapshot(conn)
    [charge] = [r for r in by_batches["operations"] if r["action"] == "charge"]
    assert '"ObservationIgnored"' in charge["evidence"]
    await conn.execute("TRUNCATE events, transactions, operations, projection_offsets")
    await project_batch(conn, TOPIC, records)
    assert await snapshot(conn) == by_batches


async def test_a_late_webhook_updates_its_operation_row_in_place(
    conn: asyncpg.Connection,
) -> None:
    # Evidence alone changes no indexed column of `operations` (migration 0004), so the
    # row's new version stays on its page (HOT) with no new entry in any index.
    log = log_of(
        submit(["charge"]),
        observed("charge", 1, Outcome.SUCCEEDED, n=0),
        observed("charge", 0, Outcome.SUCCEEDED, n=1, source=Source.WEBHOOK),
    )
    records = as_records(log)
    await project_batch(conn, TOPIC, records[:-1])

    async with conn.transaction():
        await project_batch(conn, TOPIC, records[-1:])
        updated, in_place = await conn.fetchrow(
            "SELECT pg_stat_get_xact_tuples_updated(c), pg_stat_get_xact_tuples_hot_updated(c)"
            " FROM CAST('operations' AS regclass) c"
        )

    assert log[-1].type == "ObservationIgnored"
    assert (updated, in_place) == (1, 1)


async def test_reviews_and_undo_columns_commit_with_the_operation(
    conn: asyncpg.Connection,
) -> None:
    log = log_of(
        submit(["charge"]),
        observed("charge", 1, Outcome.UNKNOWN, n=0),
        request_review("charge", 1),
    )
    await project_batch(conn, TOPIC, as_records(log))
    rid = review_id("demo", "tx-1", "charge", "forward", 1)
    [op] = await conn.fetch("SELECT * FROM operations")
    [review] = await conn.fetch("SELECT * FROM reviews")
    assert (op["state"], op["open_review_id"]) == ("manual_review", rid)
    assert op["comp_op_key"] == submit(["charge"]).operations[0].compensation_key
    assert (review["id"], review["state"], review["op_key"], review["tenant"]) == (
        rid,
        "open",
        op["op_key"],
        "demo",
    )

    # Resolved in a later batch: the review row is updated, not duplicated.
    resolved = log_of(
        submit(["charge"]),
        observed("charge", 1, Outcome.UNKNOWN, n=0),
        request_review("charge", 1),
        resolve("charge", 1, Resolution.NOT_APPLIED),
    )
    await project_batch(conn, TOPIC, as_records(resolved)[len(log) :], skipped=())
    [op] = await conn.fetch("SELECT * FROM operations")
    [review] = await conn.fetch("SELECT * FROM reviews")
    assert (op["state"], op["open_review_id"]) == ("failed", None)
    assert (review["state"], review["resolution"], review["actor"]) == (
        "resolved",
        "not_applied",
        "ops@example.com",
    )


@pytest.mark.parametrize("cached", [False, True])
async def test_a_review_is_written_only_by_the_batches_that_open_or_resolve_it(
    conn: asyncpg.Connection, cached: bool
) -> None:
    # The events after a review's resolution move its transaction, not the review: its row
    # is not written again (read back, cached=False, or kept, True), and the rows equal a
    # projection in one batch.
    log = log_of(
        submit(["charge"]),
        observed("charge", 1, Outcome.UNKNOWN, n=0),
        request_review("charge", 1),
        resolve("charge", 1, Resolution.NOT_APPLIED),
    )
    resolved = next(i for i, env in enumerate(log) if env.type == "ReviewResolved") + 1
    assert resolved < len(log), "events follow the resolution in a later batch"
    records = as_records(log)
    cache = ViewCache() if cached else None
    await project_batch(conn, TOPIC, records[:resolved], cache=cache)
    version = "SELECT xmin::text FROM reviews"
    before = await conn.fetchval(version)

    await project_batch(conn, TOPIC, records[resolved:], cache=cache)

    assert await conn.fetchval(version) == before
    by_batches = await snapshot(conn), await conn.fetch("SELECT * FROM reviews")
    await conn.execute("TRUNCATE events, transactions, operations, reviews, projection_offsets")
    await project_batch(conn, TOPIC, records)
    assert (await snapshot(conn), await conn.fetch("SELECT * FROM reviews")) == by_batches


async def test_a_drift_found_twice_is_stored_once_with_its_offsets(
    conn: asyncpg.Connection,
) -> None:
    kind = DriftKind.EFFECT_WITHOUT_INTENT
    report = DriftDetected(
        drift_id=drift_id(kind, "sandbox", "ch_1"),
        kind=kind,
        provider="sandbox",
        effect_id="ch_1",
        detail={"effect": {"id": "ch_1"}},
        detected_at="2026-01-01T00:00:00+00:00",
    )
    again = report.model_copy(update={"detected_at": "2026-01-02T00:00:00+00:00"})

    await project_drift(conn, "recon.drift", [(1, 0, report), (1, 1, again)])
    await project_drift(conn, "recon.drift", [(1, 1, again)])

    rows = await conn.fetch("SELECT * FROM drift")
    assert [(r["drift_id"], r["tenant"], r["detected_at"].day) for r in rows] == [
        (report.drift_id, None, 1)
    ]
    assert await load_offsets(conn, "recon.drift") == {1: 2}
    assert await load_offsets(conn, TOPIC) == {}
