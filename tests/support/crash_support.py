"""Starting one recon process armed to pause at a crash point (services/crash_points.py),
waiting until it is held there, and reading what Kafka holds meanwhile (open transactions
included)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition

from services.crash_points import PAUSE_AT_ENV, PAUSE_FILE_ENV
from services.devtools.stack import Stack
from support import topic_records
from support.recon_client import Recon


def start_paused_at(stack: Stack, service: str, point: str, marker: Path) -> None:
    """(Re)start `service` armed to hold at `point`; the rest of the stack stays unarmed."""
    if service in stack.processes:
        stack.stop(service)
    marker.unlink(missing_ok=True)
    stack.extra_env.update({PAUSE_AT_ENV: point, PAUSE_FILE_ENV: str(marker)})
    try:
        stack.start(service)
    finally:
        # Only this process got the arming: restarts and other processes run normally.
        del stack.extra_env[PAUSE_AT_ENV], stack.extra_env[PAUSE_FILE_ENV]


async def wait_paused(stack: Stack, name: str, marker: Path, timeout: float = 60) -> None:
    """Until `name` holds at its pause point (it wrote `marker`)."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(marker.exists):
        process = stack.processes[name]
        assert process.poll() is None, f"{name} exited:\n{stack.log_tail(name)}"
        assert time.monotonic() < deadline, f"{name} never reached its pause point"
        await asyncio.sleep(0.05)


async def wait_for_log(stack: Stack, name: str, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in stack.log_tail(name, 100_000):
        assert time.monotonic() < deadline, f"{name} never logged {text!r}"
        await asyncio.sleep(0.1)


async def until_listening(recon: Recon, timeout: float = 60) -> None:
    """Until the intake answers at all (an armed intake may never be ready as a whole:
    what it answers is the test's to see)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await recon.http.get(f"{recon.intake_url}/healthz")
            return
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the armed intake never listened"
            await asyncio.sleep(0.3)


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    value: dict[str, Any]


async def read_records(
    bootstrap: str, topic: str, isolation: str = "read_committed"
) -> list[Record]:
    """Every record of `topic` up to its end offsets, its JSON value parsed
    (support.topic_records.read_records says what each isolation level shows)."""
    return [
        Record(r.partition, r.offset, json.loads(r.value or b""))
        for r in await topic_records.read_records(bootstrap, topic, isolation)
    ]


async def last_stable_offset(bootstrap: str, topic: str, partition: int) -> int:
    """Where read_committed readers stop: before the first record of an open transaction."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        offset: int = (await consumer.end_offsets([tp]))[tp]
        return offset
    finally:
        await consumer.stop()
