"""Applying a batch of recon.events (or of recon.drift) to Postgres in one database
transaction.

The rows and the next offset of every partition in the batch commit together, so a
projection is exactly-once whatever happens between Kafka and Postgres. The partition's
offset row is locked first: two projectors that briefly own the same partition during a
rebalance serialize on it, and the second skips what the first already applied.
"""

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from events.definition import Leg, Resolution, ReviewState, TxStatus
from events.drift import DriftDetected
from events.envelope import Envelope
from events.transaction_events import Event
from projections.moves import Moves
from projections.operation_row import operation_row, operation_view
from projections.table_writes import copy_rows, upsert_sql
from projections.view import OpView, ReviewView, TxView, apply
from projections.view_cache import TxKey, ViewCache

Record = tuple[int, int, Envelope]  # partition, offset, envelope
DriftRecord = tuple[int, int, DriftDetected]  # partition, offset, report


async def project_batch(
    conn: asyncpg.Connection,
    topic: str,
    records: Sequence[Record],
    skipped: Iterable[tuple[int, int]] = (),
    *,
    bulk: bool = False,
    events: Sequence[Event] | None = None,
    cache: ViewCache | None = None,
) -> Moves:
    """Apply `records` (in the order consumed) and advance the stored offsets past them
    and past `skipped` (partition, offset) pairs, e.g. poison records already
    dead-lettered. Answers what the records applied moved (nothing for those a previous
    batch had applied already), for the metrics once the transaction has committed.

    `bulk` (audit rebuild's large batches): the same rows through COPY into temporary
    tables and one INSERT ... SELECT per table with the very ON CONFLICT clauses of the
    row-by-row statements, instead of a statement per row (projections.table_writes).

    `events`: the records' events, in their order, when the caller decoded them already.
    `cache` (the live projector): the views it keeps between batches, used only where the
    locked offset row says nobody else wrote (projections.view_cache); forgotten whole
    when the batch fails."""
    moves = Moves()
    advanced = _advanced([(p, o) for p, o, _ in records], skipped)
    if not advanced:
        return moves
    if events is not None and len(events) != len(records):
        raise ValueError(f"{len(events)} events given for {len(records)} records")
    decoded: Sequence[Event | None] = events if events is not None else [None] * len(records)
    try:
        async with conn.transaction():
            stored = await _lock_offsets(conn, topic, sorted(advanced))
            fresh = [
                (p, o, env, event)
                for (p, o, env), event in zip(records, decoded, strict=True)
                if o >= stored[p]
            ]
            views = await _views_of(conn, fresh, stored, cache)
            # What the rows hold now: read under the lock, or kept from this projector's
            # own last write of them (the cache's offset check), or nothing yet.
            stored_views = dict(views)
            changed: set[TxKey] = set()
            for _, _, envelope, event in fresh:
                key = (envelope.tenant, envelope.tx_id)
                before = views.get(key)
                after = apply(before, envelope, event)
                moves.add(before, after)
                if after is not before:
                    views[key] = after
                    changed.add(key)
            envelopes = [env for _, _, env, _ in fresh]
            changed_views = [views[key] for key in sorted(changed)]
            if bulk:
                await copy_rows(conn, "events", [_event_row(env) for env in envelopes])
                for table, rows in view_rows(changed_views).items():
                    await copy_rows(conn, table, rows)
            else:
                await _insert_events(conn, envelopes)
                await _upsert_views(
                    conn, changed_views, [stored_views.get(key) for key in sorted(changed)]
                )
            await _store_offsets(conn, topic, advanced)
    except BaseException:
        if cache is not None:
            cache.forget()  # rolled back, or not known to have committed
        raise
    if cache is not None:
        by_partition: dict[int, dict[TxKey, TxView]] = {}
        for p, _, env, _ in fresh:
            key = (env.tenant, env.tx_id)
            by_partition.setdefault(p, {})[key] = views[key]
        cache.committed(
            {p: max(stored[p], offset) for p, offset in advanced.items()},
            {p: kept.values() for p, kept in by_partition.items()},
        )
    return moves


async def _views_of(
    conn: asyncpg.Connection,
    fresh: list[tuple[int, int, Envelope, Event | None]],
    stored: dict[int, int],
    cache: ViewCache | None,
) -> dict[TxKey, TxView]:
    """The views the fresh records fold onto: kept ones where the cache is still valid,
    none for a transaction starting in this batch (seq 1, known only with the cache's
    reasoning, projections.view_cache), the rest read under the lock."""
    wanted = {(env.tenant, env.tx_id) for _, _, env, _ in fresh}
    if cache is None:
        return await _load_views(conn, wanted)
    kept = cache.views_at(stored)
    views = {key: kept[key] for key in wanted if key in kept}
    first_seq: dict[TxKey, int] = {}
    for _, _, env, _ in fresh:
        first_seq.setdefault((env.tenant, env.tx_id), env.seq)
    starting = {key for key, seq in first_seq.items() if seq == 1}
    views.update(await _load_views(conn, wanted - views.keys() - starting))
    return views


async def project_drift(
    conn: asyncpg.Connection,
    topic: str,
    records: Sequence[DriftRecord],
    skipped: Iterable[tuple[int, int]] = (),
) -> None:
    """Insert the drift reports of a batch of recon.drift and advance its offsets, in one
    database transaction. A report whose id is already stored (found again by another
    scan, scanner or webhook) is the same drift and adds nothing."""
    advanced = _advanced([(p, o) for p, o, _ in records], skipped)
    if not advanced:
        return
    async with conn.transaction():
        stored = await _lock_offsets(conn, topic, sorted(advanced))
        await conn.executemany(
            "INSERT INTO drift (drift_id, tenant, kind, provider, tx_id, action, op_key,"
            " effect_id, detail, detected_at)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10)"
            " ON CONFLICT (drift_id) DO NOTHING",
            [
                (
                    d.drift_id,
                    d.tenant,
                    d.kind.value,
                    d.provider,
                    d.tx_id,
                    d.action,
                    d.op_key,
                    d.effect_id,
                    json.dumps(d.detail),
                    datetime.fromisoformat(d.detected_at),
                )
                for p, o, d in records
                if o >= stored[p]
            ],
        )
        await _store_offsets(conn, topic, advanced)


def _advanced(
    consumed: Iterable[tuple[int, int]], skipped: Iterable[tuple[int, int]]
) -> dict[int, int]:
    advanced: dict[int, int] = {}
    for partition, offset in [*consumed, *skipped]:
        advanced[partition] = max(advanced.get(partition, 0), offset + 1)
    return advanced


async def _store_offsets(conn: asyncpg.Connection, topic: str, advanced: dict[int, int]) -> None:
    partitions = sorted(advanced)
    await conn.execute(
        "UPDATE projection_offsets o SET next_offset = n.next_offset"
        " FROM unnest($2::int[], $3::bigint[]) AS n(partition, next_offset)"
        " WHERE o.topic = $1 AND o.partition = n.partition AND o.next_offset < n.next_offset",
        topic,
        partitions,
        [advanced[p] for p in partitions],
    )


async def _lock_offsets(
    conn: asyncpg.Connection, topic: str, partitions: list[int]
) -> dict[int, int]:
    # One statement makes a new partition's row and locks every row: ON CONFLICT DO UPDATE
    # takes the row lock, waits for another projector's transaction on the same partition
    # to end and then reads the offset it stored (READ COMMITTED re-reads the newest row
    # version), so the second of two briefly owning a partition skips what the first
    # applied. Rows are taken in partition order, so two projectors cannot deadlock.
    rows = await conn.fetch(
        "INSERT INTO projection_offsets (topic, partition, next_offset)"
        " SELECT $1, p, 0 FROM unnest($2::int[]) AS p ORDER BY p"
        " ON CONFLICT (topic, partition) DO UPDATE SET next_offset = projection_offsets.next_offset"
        " RETURNING partition, next_offset",
        topic,
        partitions,
    )
    return {row["partition"]: row["next_offset"] for row in rows}


async def _load_views(conn: asyncpg.Connection, keys: set[TxKey]) -> dict[TxKey, TxView]:
    if not keys:
        return {}
    tenants = [tenant for tenant, _ in keys]
    tx_ids = [tx_id for _, tx_id in keys]
    wanted = "(tenant, tx_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))"
    tx_rows = await conn.fetch(f"SELECT * FROM transactions WHERE {wanted}", tenants, tx_ids)
    op_rows = await conn.fetch(
        f"SELECT * FROM operations WHERE {wanted} ORDER BY position", tenants, tx_ids
    )
    review_rows = await conn.fetch(
        f"SELECT * FROM reviews WHERE {wanted} ORDER BY created_at, id", tenants, tx_ids
    )
    ops: dict[TxKey, list[OpView]] = {}
    for row in op_rows:
        ops.setdefault((row["tenant"], row["tx_id"]), []).append(operation_view(row))
    reviews: dict[TxKey, list[ReviewView]] = {}
    for row in review_rows:
        reviews.setdefault((row["tenant"], row["tx_id"]), []).append(_review_view(row))
    return {
        (row["tenant"], row["tx_id"]): TxView(
            tenant=row["tenant"],
            tx_id=row["tx_id"],
            status=TxStatus(row["status"]),
            agent_id=row["agent_id"],
            last_seq=row["last_seq"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            operations=tuple(ops.get((row["tenant"], row["tx_id"]), ())),
            reviews=tuple(reviews.get((row["tenant"], row["tx_id"]), ())),
        )
        for row in tx_rows
    }


def _review_view(row: asyncpg.Record) -> ReviewView:
    return ReviewView(
        review_id=row["id"],
        action=row["action"],
        leg=Leg(row["leg"]),
        op_key=row["op_key"],
        attempt=row["attempt"],
        reason=row["reason"],
        state=ReviewState(row["state"]),
        created_at=row["created_at"],
        resolved_at=row["resolved_at"],
        resolution=Resolution(row["resolution"]) if row["resolution"] else None,
        note=row["note"],
        actor=row["actor"],
    )


async def _insert_events(conn: asyncpg.Connection, envelopes: list[Envelope]) -> None:
    # Only a replay hits the conflict on (tenant, tx_id, seq). The same event_id under
    # another key is corruption and must fail the batch, hence the explicit target.
    if not envelopes:
        return
    await conn.executemany(upsert_sql("events"), [_event_row(env) for env in envelopes])


def _event_row(env: Envelope) -> tuple[Any, ...]:
    return (
        env.tenant,
        env.tx_id,
        env.seq,
        env.event_id,
        env.type,
        env.schema_version,
        env.causation_id,
        env.correlation_id,
        datetime.fromisoformat(env.occurred_at),
        env.occurred_at,
        env.prev_hash,
        env.hash,
        json.dumps(env.data),
        env.canon,
    )


async def _upsert_views(
    conn: asyncpg.Connection, views: list[TxView], stored: list[TxView | None]
) -> None:
    for table, rows in view_rows(views, stored).items():
        if rows:  # an empty executemany is still a round trip (most batches open no review)
            await conn.executemany(upsert_sql(table), rows)


def view_rows(
    views: list[TxView], stored: Sequence[TxView | None] | None = None
) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of `transactions`, `operations` and `reviews` the views are written as.
    `stored`, for each view, the view its rows hold already (None: no rows yet): then only
    the operations the batch moved are written, since an event moves one operation and
    the others' rows, evidence included, would be written again unchanged (a webhook's
    evidence on a three-step transaction rewrote three rows, each with its whole trail)."""
    before = stored if stored is not None else [None] * len(views)
    return {
        "transactions": [
            (v.tenant, v.tx_id, v.status.value, v.agent_id, v.last_seq, v.created_at, v.updated_at)
            for v in views
        ],
        "operations": [
            operation_row(v.tenant, v.tx_id, op)
            for v, was in zip(views, before, strict=True)
            for op in _moved(v, was)
        ],
        "reviews": [_review_row(v, r) for v in views for r in v.reviews],
    }


def _moved(view: TxView, stored: TxView | None) -> Sequence[OpView]:
    """The operations of `view` that differ from `stored`'s (every one when nothing is
    stored). The fold copies only the operation an event moves (projections.view), so an
    untouched one is the very object it started from and the identity test settles it."""
    if stored is None:
        return view.operations
    return [
        op
        for op, was in zip(view.operations, stored.operations, strict=True)
        if op is not was and op != was
    ]


def _review_row(v: TxView, r: ReviewView) -> tuple[Any, ...]:
    return (
        r.review_id,
        v.tenant,
        v.tx_id,
        r.action,
        r.leg.value,
        r.op_key,
        r.attempt,
        r.reason,
        r.state.value,
        r.created_at,
        r.resolved_at,
        r.resolution.value if r.resolution else None,
        r.note,
        r.actor,
    )
