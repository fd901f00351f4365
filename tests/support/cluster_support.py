"""Asking a Kafka cluster where its leaders are and whether every replica is back in sync."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError


async def _describe(bootstrap: str) -> list[dict[str, Any]]:
    # A fresh client each time: the one node an old client talks to may be the one killed.
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        topics = await admin.list_topics()
        described: list[dict[str, Any]] = await admin.describe_topics(topics)
        return described
    finally:
        await admin.close()


async def describe(bootstrap: str, timeout: float = 30) -> list[dict[str, Any]]:
    """Every topic (Kafka's internal ones too) with its partitions' leader, replicas, ISR."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await _describe(bootstrap)
        except (KafkaError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def partition_leader(bootstrap: str, topic: str, partition: int) -> int:
    for described in await describe(bootstrap):
        if described["topic"] == topic:
            for part in described["partitions"]:
                if part["partition"] == partition and part["leader"] >= 0:
                    return int(part["leader"])
    raise AssertionError(f"no leader for {topic}[{partition}]")


def lagging(described: list[dict[str, Any]]) -> list[str]:
    """Partitions whose in-sync replicas are not all their replicas, or without a leader."""
    return [
        f"{topic['topic']}[{part['partition']}] isr={part['isr']} replicas={part['replicas']}"
        for topic in described
        for part in topic["partitions"]
        if part["leader"] < 0 or set(part["isr"]) != set(part["replicas"])
    ]


async def wait_fully_replicated(bootstrap: str, replicas: int, timeout: float = 60) -> None:
    """Until every partition has a leader and all `replicas` copies in sync: only then may
    the next broker be killed without leaving a partition below min.insync.replicas."""
    deadline = time.monotonic() + timeout
    behind: list[str] = ["not described yet"]
    while time.monotonic() < deadline:
        described = await describe(bootstrap)
        behind = lagging(described)
        short = [
            f"{topic['topic']}[{part['partition']}] replicas={part['replicas']}"
            for topic in described
            for part in topic["partitions"]
            if len(part["replicas"]) != replicas
        ]
        assert not short, f"partitions with fewer than {replicas} replicas: {short}"
        if not behind:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"replicas still out of sync after {timeout:.0f}s: {behind[:10]}")
