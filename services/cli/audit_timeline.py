"""`audit timeline --tx TX_ID`: everything the log holds about one transaction, in time
order, across the decider's inputs and outputs.

The command that asked, each provider answer, lookup and webhook the dispatcher or the
ingress reported, and each event the decider wrote, stamped with the time Kafka recorded
it (milliseconds after the first record), so an operator sees what happened and where the
time went: a slow provider, a dispatcher that was down, a review that waited for a person.
"""

import json
from dataclasses import dataclass
from typing import Any

from services.cli.log_snapshot import open_snapshot
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
        str(data[name]) for name in ("action", "leg") if data.get(name) not in (None, "", "forward")
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
    topics = settings.topics
    wanted = (topics.commands, topics.observations, topics.events)
    lines: list[Line] = []
    async with open_snapshot(settings.kafka_bootstrap, list(wanted)) as snapshot:
        progress = Progress("audit timeline", progress_every, snapshot.total)
        async for batch in snapshot.batches():
            progress.advance(len(batch))
            for record in batch:
                try:
                    body = json.loads(record.value)
                except ValueError:
                    continue  # unreadable records are audit verify's business
                if not isinstance(body, dict) or body.get("tx_id") != tx_id:
                    continue
                if tenant is not None and body.get("tenant") != tenant:
                    continue
                kind, detail = describe(body)
                short = record.topic.removeprefix(topics.prefix).removeprefix("recon.")
                lines.append(Line(record.timestamp, short, kind, detail))
    # Kafka's timestamps order records across topics; within one decision the events
    # share a timestamp and keep their seq order (a stable sort).
    return sorted(lines, key=lambda line: line.timestamp_ms)


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
