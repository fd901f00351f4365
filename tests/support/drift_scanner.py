"""What a drift test that runs the scan by hand against a test's stack needs: the
reconciler's settings, a history of effects in the sandbox, and what an adapter asked."""

import asyncio
import json
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from events.topics import Topics
from services.config import ReconcilerSettings, Settings
from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack
from services.providers.accounts import Account
from services.providers.adapters import SandboxAdapter
from services.providers.http import Answer, Requester
from services.providers.measured import Measured
from services.pull_reconciler.runtime import Reconciler
from support.decider_support import eventually
from support.recon_client import Recon, op, transaction


async def scans_by_hand(stack: Stack) -> None:
    """Stop the stack's reconciler, so that the test runs the scans itself, and forget the
    cursors it set: its first scan, a backstop a few seconds after it started, moves them
    over a whole listing, and under load it runs before the test stops it. The test's
    scans then start as a fresh deployment's would. On a module's stack an earlier test
    has stopped it already; the cursors are forgotten all the same."""
    if "reconciler" in stack.processes:
        stack.stop("reconciler")
    conn = await asyncpg.connect(stack.database_url)
    try:
        await conn.execute("DELETE FROM reconciler_drift_cursors")
    finally:
        await conn.close()


async def cli_scan(stack: Stack, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`drift --scan` (with `flags`) in its own process against the stack, a grace of 1 ms
    and `env` added: a crash point's exit code, or what an operator's run leaves."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "services.cli", "drift", "--scan", *flags],
        cwd=REPO_ROOT,
        env={**stack.env(), "RECON_DRIFT_GRACE_S": "0.001", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def scanner_settings(stack: Stack, grace_s: float) -> Settings:
    return Settings(
        kafka_bootstrap=stack.kafka_bootstrap,
        database_url=stack.database_url,
        topics=Topics(stack.topic_prefix),
        environment="dev",
        providers={"sandbox": stack.sandbox_url},
        reconciler=ReconcilerSettings(drift_grace_s=grace_s),
    )


def old_history(stack: Stack, n: int, ago: timedelta = timedelta(days=2), tag: str = "") -> None:
    """`n` effects made `ago` (by default two days ago, before the drift window), written
    straight into the sandbox's store as a long-running provider holds them; no intent
    issued their keys. `tag` (a few letters) keeps one test's history apart from another's
    on a module's one stack: a drift id is its effect's."""
    at = datetime.now(UTC) - ago
    created = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    db = sqlite3.connect(stack.log_dir / "sandbox.db")
    try:
        db.executemany(
            "INSERT INTO effects (id, operation, idempotency_key, payload, metadata, status,"
            " created_at, visible_at) VALUES (?, 'payments.charge', ?, ?, ?, 'succeeded', ?, ?)",
            [
                (
                    history_id(i, tag),
                    f"old-{tag}{i}",
                    json.dumps({"amount": 1000 + i, "currency": "usd", "customer": f"cus_{i}"}),
                    json.dumps({"op_key": f"old-{tag}{i}", "note": "history" * 10}),
                    created,
                    at.timestamp(),
                )
                for i in range(n)
            ],
        )
        db.commit()
    finally:
        db.close()


def history_id(i: int, tag: str = "") -> str:
    """The id of old_history's `i`-th effect (of its history tagged `tag`), as long
    whatever the tag."""
    return f"ch_old{tag}{i:0{24 - len(tag)}d}"


def strays_at(stack: Stack, instants: list[datetime]) -> list[str]:
    """Effects no intent issued, created (by the provider's clock) at these instants and
    listed from now on, written straight into the sandbox's store: a burst spread in time
    as a test needs it, without waiting for it. Their ids, in the instants' order."""
    now = datetime.now(UTC).timestamp()
    tag = secrets.token_hex(8)
    rows = [
        (
            f"ch_stray{i:02d}{tag}",
            f"stray-{i}-{tag}",
            json.dumps({"amount": 1 + i, "currency": "usd"}),
            json.dumps({}),
            at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            now,
        )
        for i, at in enumerate(instants)
    ]
    db = sqlite3.connect(stack.log_dir / "sandbox.db")
    try:
        db.executemany(
            "INSERT INTO effects (id, operation, idempotency_key, payload, metadata, status,"
            " created_at, visible_at) VALUES (?, 'payments.charge', ?, ?, ?, 'succeeded', ?, ?)",
            rows,
        )
        db.commit()
    finally:
        db.close()
    return [row[0] for row in rows]


def forget_effects(stack: Stack, effect_ids: list[str]) -> None:
    """The sandbox forgets these effects (a test's strays dated in its scans' future would
    otherwise fall in the next test's window)."""
    db = sqlite3.connect(stack.log_dir / "sandbox.db")
    try:
        db.executemany("DELETE FROM effects WHERE id = ?", [(i,) for i in effect_ids])
        db.commit()
    finally:
        db.close()


@asynccontextmanager
async def history_and_a_stray(stack: Stack, recon: Recon, n: int) -> AsyncIterator[str]:
    """old_history's `n` effects and a stray charge made now (in the window, no intent):
    the stray's id. Both are forgotten after, so that a scan of a module's next test over
    the window does not find them."""
    old_history(stack, n)
    made = [history_id(i) for i in range(n)]
    try:
        stray = await recon.http.post(
            f"{stack.sandbox_url}/v1/effects/unrecorded",
            json={"operation": "payments.charge", "payload": {"amount": 7, "currency": "usd"}},
        )
        assert stray.status_code == 200, stray.text
        made.append(stray.json()["id"])
        yield stray.json()["id"]
    finally:
        forget_effects(stack, made)


async def dropped_delivery(stack: Stack, recon: Recon, effect_id: str) -> dict[str, Any]:
    """The effect's webhook delivery, once dropped (a `webhook_drop` fault armed before the
    effect): the sandbox's sender drops it when it takes the delivery, a moment after the
    effect (one read under load still saw it pending). Its `event_id` is what the
    sandbox's replay, the provider's retry, sends again."""

    async def dropped() -> dict[str, Any] | None:
        listed = await recon.http.get(
            f"{stack.sandbox_url}/v1/webhooks/deliveries", params={"effect_id": effect_id}
        )
        [delivery] = listed.json()["deliveries"]
        return delivery if delivery["status"] == "dropped" else None

    found: dict[str, Any] = await eventually(dropped, f"{effect_id}'s webhook dropped", timeout=30)
    return found


async def held_back_stray(stack: Stack, recon: Recon) -> str:
    """A stray charge (an effect no intent made) whose webhook is held back (dropped at its
    first delivery): the event id the sandbox's replay, the provider's retry, sends, so
    that the test chooses when the intake reports its drift."""
    await recon.arm("payments.charge", "webhook_drop")
    made = await recon.http.post(
        f"{stack.sandbox_url}/v1/effects/unrecorded",
        json={"operation": "payments.charge", "payload": {"amount": 13, "currency": "usd"}},
    )
    assert made.status_code == 200, made.text
    event: str = (await dropped_delivery(stack, recon, made.json()["id"]))["event_id"]
    return event


async def hole(stack: Stack) -> tuple[datetime, datetime] | None:
    """The shared sandbox account's hole (reconcilers.drift_span.Hole), if it has one."""
    conn = await asyncpg.connect(stack.database_url)
    try:
        row = await conn.fetchrow(
            "SELECT hole_from, hole_to FROM reconciler_drift_cursors"
            " WHERE provider = 'sandbox' AND account = '' AND hole_from IS NOT NULL"
        )
        return None if row is None else (row["hole_from"], row["hole_to"])
    finally:
        await conn.close()


class Asked:
    """What an adapter asked its provider: each request's query parameters (put in place
    of the adapter's `http`)."""

    def __init__(self, inner: Requester) -> None:
        self.inner = inner
        self.params: list[dict[str, str]] = []

    async def request(self, method: str, url: str, **sent: Any) -> Answer:
        self.params.append(dict(sent.get("params") or {}))
        return await self.inner.request(method, url, **sent)


def sandbox_of(reconciler: Reconciler) -> SandboxAdapter:
    """The reconciler's adapter of the shared sandbox account, under its metering."""
    measured = reconciler.accounts.adapters[Account("sandbox")]
    assert isinstance(measured, Measured) and isinstance(measured.inner, SandboxAdapter)
    return measured.inner


def asked(reconciler: Reconciler) -> Asked:
    """Record what the reconciler's sandbox adapter asks from now on."""
    sandbox = sandbox_of(reconciler)
    sandbox.http = Asked(sandbox.http)
    return sandbox.http


@asynccontextmanager
async def charges_lost_for_the_test(
    stack: Stack, recon: Recon, tag: str
) -> AsyncIterator[dict[str, str]]:
    """Three committed transactions ("old", "middle", "new" in that order, their ids
    ending in `tag`: the test's own), then the charges of the first and the last lose their
    effect at the sandbox (deleted from its store, as a provider that lost them); each
    transaction's charge op key, by those names. The sandbox holds the lost effects again
    after the test: on a module's one stack (module_stack) the next test's scans would
    find those legs' effects missing."""
    charges: dict[str, str] = {}
    for name in ("old", "middle", "new"):
        tx_id = name + tag
        assert (await recon.submit(transaction(tx_id, receipt=False))).status_code == 202
        tx = await recon.wait_terminal(tx_id)
        assert tx["status"] == "committed"
        charges[name] = op(tx, "charge")["op_key"]
    lost = lose_effects(stack, charges["old"], charges["new"])
    try:
        yield charges
    finally:
        restore_effects(stack, lost)


async def a_charge_that_lost_its_effect(stack: Stack, recon: Recon, tx_id: str) -> str:
    """A committed transaction whose charge the sandbox then loses (intent without effect,
    which only the scan reports: a stray effect would be reported by the webhook ingress
    too); the charge's op key."""
    assert (await recon.submit(transaction(tx_id, receipt=False))).status_code == 202
    tx = await recon.wait_terminal(tx_id)
    assert tx["status"] == "committed"
    charge: str = op(tx, "charge")["op_key"]
    lose_effects(stack, charge)
    return charge


def lose_effects(stack: Stack, *keys: str) -> list[tuple[Any, ...]]:
    """The sandbox loses the effects under these idempotency keys; their rows, for
    restore_effects."""
    db = sqlite3.connect(stack.log_dir / "sandbox.db")
    try:
        marks = ", ".join("?" for _ in keys)
        rows = db.execute(
            f"SELECT * FROM effects WHERE idempotency_key IN ({marks})", keys
        ).fetchall()
        db.executemany("DELETE FROM effects WHERE idempotency_key = ?", [(k,) for k in keys])
        db.commit()
        return rows
    finally:
        db.close()


def restore_effects(stack: Stack, rows: list[tuple[Any, ...]]) -> None:
    """The sandbox holds again the effects lose_effects took (their rows as they were)."""
    if not rows:
        return
    db = sqlite3.connect(stack.log_dir / "sandbox.db")
    try:
        marks = ", ".join("?" for _ in rows[0])
        db.executemany(f"INSERT INTO effects VALUES ({marks})", rows)
        db.commit()
    finally:
        db.close()


async def cursor(stack: Stack) -> datetime | None:
    """The shared sandbox account's drift cursor (None: never scanned whole)."""
    conn = await asyncpg.connect(stack.database_url)
    try:
        at: datetime | None = await conn.fetchval(
            "SELECT judged_to FROM reconciler_drift_cursors"
            " WHERE provider = 'sandbox' AND account = ''"
        )
        return at
    finally:
        await conn.close()
