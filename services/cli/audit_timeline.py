"""`audit timeline --tx TX_ID`: everything the log holds about one transaction, in time
order, across the decider's inputs and outputs.

The command that asked, each provider answer, lookup and webhook the dispatcher or the
ingress reported, and each event the decider wrote, stamped with the time Kafka recorded
it (milliseconds after the first record), so an operator sees what happened and where the
time went: a slow provider, a dispatcher that was down, a review that waited for a person.
"""

from dataclasses import dataclass
from typing import Any

from events.definition import Leg
from events.keys import partition_key
from services.cli.log_snapshot import open_snapshot
from services.cli.partition_reader import Record, open_reader
from services.cli.progress import Progress
from services.cli.transaction_window import (
    Known,
    Transaction,
    ask_projection,
    events_of,
    inputs_of,
)
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


async def timeline(
    settings: Settings, tenant: str | None, tx_id: str, progress_every: int
) -> list[Line]:
    known = await ask_projection(settings.database_url, settings.topics.events, tenant, tx_id)
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


def _line(record: Record, body: dict[str, Any], prefix: str) -> Line:
    kind, detail = describe(body)
    short = record.topic.removeprefix(prefix).removeprefix("recon.")
    return Line(record.timestamp, short, kind, detail)


async def _scan_everything(
    settings: Settings, tenant: str | None, tx_id: str, progress_every: int
) -> list[Line]:
    topics = settings.topics
    wanted = (topics.commands, topics.observations, topics.events)
    tx = Transaction(tenant, tx_id)
    lines: list[Line] = []
    async with open_snapshot(settings.kafka_bootstrap, list(wanted)) as snapshot:
        progress = Progress("audit timeline", progress_every, snapshot.total)
        async for batch in snapshot.batches():
            progress.advance(len(batch))
            for record in batch:
                body = tx.body(record)
                if body is not None:
                    lines.append(_line(record, body, topics.prefix))
    return sorted(lines, key=lambda line: line.timestamp_ms)


async def _one_transaction(
    settings: Settings, tenant: str, tx_id: str, hint: Known | None
) -> list[Line]:
    """Only the partition the transaction's key maps to, and of it only the window its
    records can be in (services.cli.transaction_window)."""
    topics = settings.topics
    key = partition_key(tenant, tx_id)
    tx = Transaction(tenant, tx_id)
    wanted = [topics.events, topics.commands, topics.observations]
    async with open_reader(settings.kafka_bootstrap, wanted) as log:
        events_tp = log.partition_of(topics.events, key)
        inputs_tps = [log.partition_of(t, key) for t in (topics.commands, topics.observations)]
        events = await events_of(log, events_tp, tx, hint)
        if events:
            inputs = await inputs_of(log, inputs_tps, tx, events, hint)
            found = events + [f for tp in inputs_tps for f in inputs[tp]]
        else:
            # Submitted but never decided: the inputs are somewhere in their partitions.
            found = [
                f
                for tp in inputs_tps
                for f in tx.located((await log.read(tp, 0, None, tx.keep))[0])
            ]
    return [_line(r, b, topics.prefix) for r, b in found]


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
