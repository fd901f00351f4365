"""One drift scan's listing and comparison against a real sandbox holding N effects
(docs/webhooks-reviews-drift.md, "How the scan lists").

`uv run python -m services.devtools.drift_scan_cost 200 1000 5000` (env IN_WINDOW=k: only
the newest k effects are inside the 24 h window, the rest two days older; default: all of
them inside). For each N it starts the sandbox (ports 8401 on) on a SQLite file it fills
directly, then times what the reconciler does per account, 3 times after a warm-up: the
listing as an account's first scan asks for it, its whole window (services.providers.
listing), effect_from_json, and compare against a ledger holding every in-window effect's
leg. Prints wall ms, this process's CPU ms (the reconciler's side) and the sandbox's
(/proc). Postgres's part (store.ledger, store.known_keys) is not in these figures.
"""

import asyncio
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from events.definition import Leg
from reconcilers.drift import LedgerEntry, compare, effect_from_json
from services.devtools.sandbox.store import SandboxStore
from services.providers.adapters import SandboxAdapter
from services.providers.http import ProviderHttp
from services.providers.listing import listing_of

TICKS = os.sysconf("SC_CLK_TCK")
WINDOW = timedelta(days=1)
GRACE = timedelta(seconds=60)


def cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICKS


def fill(path: Path, n: int, in_window: int, now: datetime) -> list[LedgerEntry]:
    """`n` charges a second apart, the oldest `n - in_window` of them two days back; the
    ledger of the in-window ones, each with its effect (so no drift)."""
    SandboxStore(path).close()
    ledger = []
    rows = []
    for i in range(n):
        at = now - timedelta(minutes=5) - timedelta(seconds=n - i)
        if i < n - in_window:
            at -= timedelta(days=2)
        key = f"op-{i}-{secrets.token_hex(4)}"
        payload = {"amount": 1000 + i, "currency": "usd", "customer": f"cus_{i}"}
        iso = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        metadata = json.dumps({"op_key": key})
        effect_id = f"ch_{secrets.token_hex(12)}"
        rows.append((effect_id, key, json.dumps(payload), metadata, iso, at.timestamp()))
        if i >= n - in_window:
            ledger.append(
                LedgerEntry(
                    tenant="t",
                    tx_id=f"tx{i}",
                    action="charge",
                    leg=Leg.FORWARD,
                    op_key=key,
                    provider="sandbox",
                    operation="payments.charge",
                    payload=payload,
                    dispatched_at=at,
                    confirmed=True,
                )
            )
    db = sqlite3.connect(path)
    db.executemany(
        "INSERT INTO effects (id, operation, idempotency_key, payload, metadata, status,"
        " created_at, visible_at) VALUES (?, 'payments.charge', ?, ?, ?, 'succeeded', ?, ?)",
        rows,
    )
    db.commit()
    db.close()
    return ledger


async def scans(url: str, sandbox_pid: int, ledger: list[LedgerEntry], now: datetime) -> None:
    async with ProviderHttp(10.0) as http:
        adapter = SandboxAdapter(http, url)
        for _ in range(100):  # until the sandbox answers
            try:
                await http.request("GET", url + "/v1/effects", params={"idempotency_key": "x"})
                break
            except Exception:
                await asyncio.sleep(0.1)
        window_start = now - WINDOW
        for run in range(4):
            wall, mine, theirs = time.perf_counter(), time.process_time(), cpu_ms(sandbox_pid)
            try:
                # As an account's first scan asks (no cursor yet, reconcilers.drift_span): the
                # window less the grace. A later scan asks from its cursor less the grace
                # (docs/webhooks-reviews-drift.md, "The incremental scan", has its figures).
                listing = await listing_of(adapter, window_start - GRACE)
                effects = [effect_from_json(e) for e in listing.effects]
                found = compare(
                    provider="sandbox",
                    effects=effects,
                    ledger=ledger,
                    known_keys=set(),
                    now=now,
                    window_start=window_start,
                    grace=GRACE,
                    covered_from=listing.covered_from,
                )
                outcome = f"{len(effects)} listed, {len(found)} drifts"
            except Exception as error:  # a failure mode is a figure too
                outcome = f"FAILED {type(error).__name__}: {error}"
            wall = (time.perf_counter() - wall) * 1000
            mine = (time.process_time() - mine) * 1000
            theirs = cpu_ms(sandbox_pid) - theirs
            if run:  # the first warms the connection and the sandbox
                print(
                    f"N={len(ledger)} in the window: wall {wall:.0f} ms, reconciler CPU"
                    f" {mine:.0f} ms, sandbox CPU {theirs:.0f} ms; {outcome}",
                    flush=True,
                )


def measure(n: int, port: int, directory: Path) -> None:
    now = datetime.now(UTC)
    in_window = min(int(os.environ.get("IN_WINDOW", n)), n)
    path = directory / f"sandbox-{n}.db"
    ledger = fill(path, n, in_window, now)
    print(f"sandbox holding {n} effects:", flush=True)
    command = [sys.executable, "-m", "services.devtools.sandbox", "--port", str(port)]
    sandbox = subprocess.Popen([*command, "--db", str(path), "--log-level", "warning"])
    try:
        asyncio.run(scans(f"http://127.0.0.1:{port}", sandbox.pid, ledger, now))
    finally:
        sandbox.terminate()
        sandbox.wait()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="drift-scan-cost-") as directory:
        for i, n in enumerate(int(a) for a in sys.argv[1:]):
            measure(n, 8401 + i, Path(directory))


if __name__ == "__main__":
    main()
