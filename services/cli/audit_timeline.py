"""`audit timeline --tx TX_ID`: everything the log holds about one transaction, in time
order, across the decider's inputs and outputs.

The command that asked, each provider answer, lookup and webhook the dispatcher or the
ingress reported, and each event the decider wrote, stamped with the time Kafka recorded
it (milliseconds after the first record), so an operator sees what happened and where the
time went: a slow provider, a dispatcher that was down, a review that waited for a person.
"""

import json
import sys
from dataclasses import dataclass
from typing import Any

import asyncpg

from events.definition import Leg
from events.keys import partition_key
from projections.offsets import load_offsets
from services.cli.log_snapshot import open_snapshot
from services.cli.partition_reader import Record, open_reader
from services.cli.progress import Progress
from services.config import Settings


@dataclass(frozen=True)
class Line:
    timestamp_ms: int
    topic: str
    kind: str
    detail: str


def describe(record: dict[str, Any]) -> tuple[str, str]:
    """(type, detail) of a command, observation or event envelope, for one line."""
    data = record.get("data") if isinstance(record.get("data"), dict) else record
    assert isinstance(data, dict)
    parts = [
        str(data[name])
        for name in ("action", "leg")
        if data.get(name) not in (None, "", Leg.FORWARD)
    ]
    for name in ("attempt", "source", "outcome", "status_code", "reason", "resolution"):
        if data.get(name) not in (None, ""):
            parts.append(f"{name}={data[name]}")
    if "seq" in record:
        parts.insert(0, f"seq={record['seq']}")
    return str(record.get("type", "?")), " ".join(parts)


# How far Kafka's timestamps of one transaction's records may stray from the times the
# projection holds (the clocks of the intake, the dispatchers and the decider, and the
# decider's delay). Too small costs a second read, never a missing record: the events'
# seqs and causation ids say when the window missed something, and it is widened.
SLACK_MS = 30_000


@dataclass(frozen=True)
class Known:
    """What the projection knows of one transaction: enough to place it on the log."""

    tenant: str
    first_at_ms: int  # occurred_at of its first event
    last_seq: int
    projected_to: dict[int, int]  # partition of recon.events -> next offset the projector reads


async def timeline(
    settings: Settings, tenant: str | None, tx_id: str, progress_every: int
) -> list[Line]:
    known = await _ask_projection(settings.database_url, settings.topics.events, tenant, tx_id)
    tenants = [k.tenant for k in known] if known else ([tenant] if tenant else [])
    if not tenants:
        # No tenant to compute the partition from: every record of every partition.
        return await _scan_everything(settings, tenant, tx_id, progress_every)
    lines: list[Line] = []
    for t in tenants:
        hint = next((k for k in known if k.tenant == t), None)
        lines += await _one_transaction(settings, t, tx_id, hint)
    # Kafka's timestamps order records across topics; within one decision the events
    # share a timestamp and keep their seq order (a stable sort).
    return sorted(lines, key=lambda line: line.timestamp_ms)


async def _ask_projection(
    database_url: str, events_topic: str, tenant: str | None, tx_id: str
) -> list[Known]:
    """The transaction's tenants and first event times from the projection; empty when
    it is unreachable or does not know the transaction (the timeline then finds it on
    the log alone)."""
    try:
        conn = await asyncpg.connect(database_url, timeout=3)
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        print(f"audit timeline: projection unreachable ({exc}); reading the log", file=sys.stderr)
        return []
    try:
        if tenant is None:
            rows = await conn.fetch("SELECT tenant FROM transactions WHERE tx_id = $1", tx_id)
            tenants = sorted(r["tenant"] for r in rows)
        else:
            tenants = [tenant]
        offsets = await load_offsets(conn, events_topic)
        known = []
        for t in tenants:
            row = await conn.fetchrow(
                "SELECT min(occurred_at) AS first_at, max(seq) AS last_seq FROM events"
                " WHERE tenant = $1 AND tx_id = $2",
                t,
                tx_id,
            )
            if row is not None and row["last_seq"] is not None:
                first_ms = int(row["first_at"].timestamp() * 1000)
                known.append(Known(t, first_ms, row["last_seq"], offsets))
        return known
    except asyncpg.PostgresError as exc:  # e.g. a database without the schema
        print(f"audit timeline: projection not readable ({exc}); reading the log", file=sys.stderr)
        return []
    finally:
        await conn.close()


def _line(record: Record, body: dict[str, Any], prefix: str) -> Line:
    kind, detail = describe(body)
    short = record.topic.removeprefix(prefix).removeprefix("recon.")
    return Line(record.timestamp, short, kind, detail)


def _body(record: Record, tenant: str | None, tx_id: str) -> dict[str, Any] | None:
    try:
        body = json.loads(record.value or b"")
    except ValueError:
        return None  # unreadable records are audit verify's business
    if not isinstance(body, dict) or body.get("tx_id") != tx_id:
        return None
    if tenant is not None and body.get("tenant") != tenant:
        return None
    return body


async def _scan_everything(
    settings: Settings, tenant: str | None, tx_id: str, progress_every: int
) -> list[Line]:
    topics = settings.topics
    wanted = (topics.commands, topics.observations, topics.events)
    lines: list[Line] = []
    async with open_snapshot(settings.kafka_bootstrap, list(wanted)) as snapshot:
        progress = Progress("audit timeline", progress_every, snapshot.total)
        async for batch in snapshot.batches():
            progress.advance(len(batch))
            for record in batch:
                body = _body(record, tenant, tx_id)
                if body is not None:
                    lines.append(_line(record, body, topics.prefix))
    return sorted(lines, key=lambda line: line.timestamp_ms)


async def _one_transaction(
    settings: Settings, tenant: str, tx_id: str, hint: Known | None
) -> list[Line]:
    """Only the partition the transaction's key maps to, and of it only the window its
    records can be in."""
    topics = settings.topics
    key = partition_key(tenant, tx_id)

    def keep(record: Record) -> bool:
        return _body(record, tenant, tx_id) is not None

    def located(records: list[Record]) -> list[tuple[Record, dict[str, Any]]]:
        return [(r, b) for r in records if (b := _body(r, tenant, tx_id)) is not None]

    wanted = [topics.events, topics.commands, topics.observations]
    async with open_reader(settings.kafka_bootstrap, wanted) as log:
        events_tp = log.partition_of(topics.events, key)
        if hint is None:
            # Not projected (or no projection): the events are somewhere in their partition.
            events, _ = await log.read(events_tp, 0, None, keep)
        else:
            last_seq = hint.last_seq

            def last(record: Record) -> bool:
                body = _body(record, tenant, tx_id)
                return body is not None and body.get("seq") == last_seq

            slack = SLACK_MS
            while True:
                start = await log.offset_at(events_tp, hint.first_at_ms - slack)
                events, stopped = await log.read(events_tp, start, None, keep, last)
                # Seq 1 in the window: it starts early enough (nothing of this transaction
                # comes before its first event). Else widen it, down to offset 0.
                if any((_body(r, tenant, tx_id) or {}).get("seq") == 1 for r in events):
                    break
                if start == 0:
                    break
                slack *= 4
            # Events written after the projection last read this partition: the tail.
            tail_from = max(stopped, hint.projected_to.get(events_tp.partition, 0))
            events += (await log.read(events_tp, tail_from, None, keep))[0]
        found = located(events)
        lines = [_line(r, b, topics.prefix) for r, b in found]
        inputs_tps = [log.partition_of(t, key) for t in (topics.commands, topics.observations)]
        if not found:
            # Submitted but never decided: the inputs are somewhere in their partitions.
            for tp in inputs_tps:
                records, _ = await log.read(tp, 0, None, keep)
                lines += [_line(r, b, topics.prefix) for r, b in located(records)]
            return lines
        causes = {str(b.get("causation_id")) for _, b in found}
        first_ms = min(r.timestamp for r, _ in found)
        if hint is not None:
            first_ms = min(first_ms, hint.first_at_ms)
        last_ms = max(r.timestamp for r, _ in found)
        slack = SLACK_MS
        while True:
            inputs: list[tuple[Record, dict[str, Any]]] = []
            whole = True
            for tp in inputs_tps:
                start = await log.offset_at(tp, first_ms - slack)
                stop = await log.offset_at(tp, last_ms + slack)
                whole = whole and start == 0 and stop == await log.end(tp)
                inputs += located((await log.read(tp, start, stop, keep))[0])
            # Every event was decided from an input on these topics: an event whose input
            # is not in the window says the window is too narrow.
            if causes <= {str(b.get("message_id")) for _, b in inputs} or whole:
                break
            slack *= 4
        return lines + [_line(r, b, topics.prefix) for r, b in inputs]


async def run_timeline(
    settings: Settings, tenant: str | None, tx_id: str, progress_every: int
) -> int:
    lines = await timeline(settings, tenant, tx_id, progress_every)
    if not lines:
        print(f"audit timeline: nothing on the log for tx {tx_id}")
        return 1
    start = lines[0].timestamp_ms
    for line in lines:
        print(f"{line.timestamp_ms - start:>8} ms  {line.topic:<12} {line.kind:<24} {line.detail}")
    return 0
