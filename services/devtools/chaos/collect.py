"""Reading a run's history back: the event log and drift from Kafka (offset 0, committed
records only, as an auditor reads them), the provider's effects, and the audit commands."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from events.topics import Topics
from services.cli.log_snapshot import AuditError, open_snapshot
from services.devtools.chaos.history import DriftReport, ProviderEffect
from services.devtools.infra._process import REPO_ROOT
from services.devtools.sandbox.call_pages import every_call
from services.devtools.sandbox.effect_pages import every_effect
from services.devtools.stack import Stack


async def read_topic(bootstrap: str, topic: str) -> list[bytes]:
    try:
        async with open_snapshot(bootstrap, [topic]) as snapshot:
            return [r.value or b"" async for batch in snapshot.batches() for r in batch]
    except AuditError:
        return []  # not created yet: nothing was written to it


async def read_events(stack: Stack, tenant: str = "demo") -> dict[str, tuple[dict[str, Any], ...]]:
    """The tenant's envelopes per tx_id, in log order (one partition per transaction)."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for value in await read_topic(stack.kafka_bootstrap, Topics(stack.topic_prefix).events):
        envelope = json.loads(value)
        if envelope.get("tenant") == tenant:
            grouped[envelope["tx_id"]].append(envelope)
    return {tx_id: tuple(envs) for tx_id, envs in grouped.items()}


async def read_drift(stack: Stack) -> tuple[DriftReport, ...]:
    reports = {}
    for value in await read_topic(stack.kafka_bootstrap, Topics(stack.topic_prefix).drift):
        data = json.loads(value)
        reports[data["drift_id"]] = DriftReport(
            data["drift_id"], data["kind"], data.get("effect_id"), data.get("op_key")
        )
    return tuple(reports.values())


async def read_effects(stack: Stack) -> tuple[ProviderEffect, ...]:
    """Every effect the provider lists, with the number of calls that applied it, counted
    from the sandbox's call log (GET /v1/calls): the effects table holds one row per key
    whatever happens, so only the call log can show a key applied twice."""
    # Read once the run is quiescent, in pages: a 10,000-transaction run lists ~30,000
    # effects and ~40,000 calls, which a loaded sandbox took over a minute to answer in one
    # body (a 60 s timeout ended a run without its verdict); the long timeout stays for a
    # page asked of a sandbox still loaded.
    async with httpx.AsyncClient(timeout=600) as client:
        effects = await every_effect(client, stack.sandbox_url)
        calls = await every_call(client, stack.sandbox_url)
    applied = Counter(
        c["idempotency_key"] for c in calls if c["kind"] == "apply" and c["outcome"] == "applied"
    )
    return tuple(
        ProviderEffect(
            effect_id=e["id"],
            operation=e["operation"],
            idempotency_key=e["idempotency_key"],
            created_at=datetime.fromisoformat(e["created_at"]),
            # An effect is at least one apply, even if its log entry was lost (the log is
            # written after the effect, in its own transaction).
            applied_calls=max(1, applied[e["idempotency_key"]]),
        )
        for e in effects
    )


async def _cli(stack: Stack, *args: str) -> tuple[bool, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli",
        *args,
        cwd=REPO_ROOT,
        env=stack.env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return process.returncode == 0, out.decode(errors="replace")


async def audit_verify(stack: Stack) -> tuple[bool, str]:
    return await _cli(stack, "audit", "verify")


async def audit_rebuild_compare(stack: Stack) -> tuple[bool, str]:
    """`audit rebuild --compare` into a fresh database on the same server, dropped after."""
    name = f"chaos_rebuild_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(stack.database_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    into = urlunsplit(urlsplit(stack.database_url)._replace(path=f"/{name}"))
    try:
        return await _cli(stack, "audit", "rebuild", "--into", into, "--compare", "--wait", "60")
    finally:
        admin = await asyncpg.connect(stack.database_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
