"""Benchmark of the auditor's paths on a generated log of a million events or more.

`python -m services.devtools.audit_bench` (what `make audit-bench` runs) starts its own
Kafka and Postgres in .cache/audit-bench (or uses --kafka/--database), writes `--events`
hash-chained events of many transactions (services.devtools.synthetic_log: the real
decider's events, with their commands and observations) under a fresh topic prefix, then
times, each as the operator runs it (`python -m services.cli` in a subprocess):

- `audit verify` of the whole log (events/s),
- `audit rebuild` into a fresh database (events/s),
- `audit timeline --tx` of a few transactions, with the rebuilt projection as the one the
  timeline asks (its fast path), and once with no projection (its fallback).

`--decider` also writes each transaction's finished marker to recon.decider-state, starts
`python -m services.decider` on the prefix and reports how long it takes to restore
every partition and its resident memory once it has.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from aiokafka import AIOKafkaProducer

from events.topics import Topics
from services.cli.progress import Progress
from services.devtools.infra._process import REPO_ROOT
from services.devtools.synthetic_log import Produced, simulated_start, transaction_records
from services.kafka_setup import ensure_topics

CHUNK = 400  # transactions per task of the generating processes
EVENTS_PER_TX = 8.5  # what synthetic_log writes on average (webhook_every=2)


@dataclass
class Generated:
    transactions: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _chunk(first: int, last: int, start_ms: int) -> list[tuple[str, bytes, bytes, int]]:
    from datetime import UTC, datetime

    start = datetime.fromtimestamp(start_ms / 1000, UTC)
    return [
        (r.role, r.key, r.value, r.timestamp_ms)
        for i in range(first, last)
        for r in transaction_records(i, start, webhook_every=2)
    ]


async def generate(
    bootstrap: str, topics: Topics, events: int, workers: int, with_markers: bool
) -> Generated:
    """Produce transactions until at least `events` events are on recon.events."""
    await ensure_topics(bootstrap, topics)
    planned = int(events / EVENTS_PER_TX) + CHUNK
    start_ms = int(simulated_start(planned).timestamp() * 1000)
    topic_of = {
        "commands": topics.commands,
        "observations": topics.observations,
        "events": topics.events,
        "decider_state": topics.decider_state,
    }
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=20,
        max_batch_size=1 << 20,
        max_request_size=8 << 20,
        compression_type=None,
    )
    await producer.start()
    out = Generated()
    began = time.monotonic()
    loop = asyncio.get_running_loop()
    try:
        with (
            ProcessPoolExecutor(max_workers=workers) as pool,
            Progress("generate", CHUNK * 25, events, unit="events") as progress,
        ):
            pending: list[Future[list[tuple[str, bytes, bytes, int]]]] = []
            next_tx = 0
            written = 0
            while written < events or pending:
                # Keep every generating process busy, a few chunks ahead of the producer.
                while written < events and len(pending) < workers * 3 and next_tx < planned:
                    pending.append(pool.submit(_chunk, next_tx, next_tx + CHUNK, start_ms))
                    next_tx += CHUNK
                if not pending:
                    break
                records = await asyncio.wrap_future(pending.pop(0), loop=loop)
                acks = []
                for role, key, value, ts in records:
                    if role == "decider_state" and not with_markers:
                        continue
                    acks.append(
                        await producer.send(topic_of[role], value, key, timestamp_ms=ts)
                    )
                    out.counts[role] = out.counts.get(role, 0) + 1
                out.transactions += CHUNK
                n = sum(1 for r in records if r[0] == "events")
                written += n
                progress.advance(n)
                if len(acks) > 0:
                    await acks[-1]
        await producer.flush()
    finally:
        await producer.stop()
    out.seconds = time.monotonic() - began
    return out
