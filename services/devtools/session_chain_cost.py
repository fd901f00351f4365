"""What an agent session's claim or release costs the intake as its transaction's chain of
session events grows: the measurement behind the intake's answer to a session's command
(services.intake.ownership.known_transaction), which judges it on the transaction as the
projection shows it.

`python -m services.devtools.session_chain_cost` starts its own Kafka, Postgres (with
pg_stat_statements, each service as a role of its own: services.devtools.pg_counts) and
recon stack in .cache/session_chain_cost<offset> (Kafka and Postgres on 19092 and 15432
plus `--port-offset`, the intake and the sandbox on free ports), with a write's approval
required (so each transaction stays live) and a lease of an hour. For each N of `--chains`
it submits two transactions and gives each N session events
(transactions.input_bounds.SESSION_CAUSED): N fresh sessions each send a release, refused
`fenced` on the log. On the second the owner then releases it once.

Then, in `--rounds` rounds, the N taking turns in alternating order so that the machine's
other work falls on every N alike, it sends `--requests` of each kind, four at a time:

- claim: a fresh session claims the first transaction while its owner's lease holds. The
  intake answers it itself (`409 lease_held`; `429 too_many_commands` once N reaches the
  cap) and produces nothing, so the chain stays N: what an attacker's repeated claim costs.
- release: the owner releases the second again: produced (`202`), and the decider records
  nothing for it (the same message id), so that chain stays N + 1.
- page: an operator, logged in to the console, looks at the first transaction's step waiting
  for approval (GET /console/approvals/{tx_id}/charge): what an operator's look at a step
  costs as an agent grows its chain.
- approve: an operator approves that step naming a preview digest that is not its
  preview's: the intake asks the decider's rule on the chain's fold, which refuses it
  (`409 digest_mismatch`), and produces nothing.

`--kinds` picks among them (all by default).

Printed per N and kind: the intake process's CPU in ms per request (the median of the
rounds, and the least), its Postgres statements and rows per request (pg_stat_statements'
`calls` and `rows` of the intake's role, reset before each turn), and the Postgres server's
CPU per request (every backend, so the other services' idle polls are in it). The intake's
idle CPU over `--idle` seconds is printed first: it falls on every turn alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx

from events.transaction_events import event_from
from services.config import DEFAULTS
from services.devtools import pg_counts, pg_server_cost
from services.devtools.cpu_account import process_seconds
from services.devtools.infra import KafkaBroker, PostgresServer
from services.devtools.infra._process import REPO_ROOT
from services.devtools.ports import free_port
from services.devtools.stack import SERVICES, Stack
from services.intake.example import example_transaction
from services.intake.owner_token import owner_token
from transactions.input_bounds import counts_against_sessions

TENANT = "demo"
AGENT = {"Authorization": "Bearer demo-key"}
# The stack's operator key (services.config's RECON_OPERATOR_KEYS default).
OPERATOR_KEY = "ops-key"
KINDS = ("claim", "release", "page", "approve")
SECRET = DEFAULTS["RECON_OWNER_TOKEN_SECRET"]
RECON_SERVICES = [s for s in SERVICES if s != "sandbox"]
IN_FLIGHT = 4


def _body(tx_id: str) -> dict[str, Any]:
    # Its charge is a write: it waits for a person's approval, so the transaction lives.
    # Without its undo, which would need an approval too, and a compensation has none.
    example = example_transaction(tx_id, receipt=False)
    charge = {k: v for k, v in example["steps"][-1].items() if k != "compensation"}
    return {**example, "steps": [charge], "session_id": "s-A"}


def _session(tx_id: str, agent: str, session: str) -> dict[str, str]:
    token = owner_token(SECRET, TENANT, tx_id, agent, session)
    return {"agent_id": agent, "session_id": session, "owner_token": token}


async def _session_events(db: asyncpg.Connection, tx_id: str) -> tuple[int, list[str]]:
    rows = await db.fetch(
        "SELECT type, data FROM events WHERE tenant = $1 AND tx_id = $2 ORDER BY seq",
        TENANT,
        tx_id,
    )
    events = [event_from(r["type"], json.loads(r["data"])) for r in rows]
    return sum(counts_against_sessions(e) for e in events), [r["type"] for r in rows]


async def _until_projected(
    db: asyncpg.Connection, tx_id: str, sessions: int, last: str | None = None
) -> None:
    deadline = time.monotonic() + 120
    while True:
        counted, types = await _session_events(db, tx_id)
        if counted >= sessions and types and (last is None or types[-1] == last):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{tx_id}: {counted} of {sessions} session events projected")
        await asyncio.sleep(0.1)


Request = Callable[[], Awaitable[httpx.Response]]


def _post(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str] = AGENT
) -> Request:
    return lambda: http.post(path, json=body, headers=headers)


async def _gather(calls: list[Request]) -> list[int]:
    """Send each request, IN_FLIGHT at a time; the answers' statuses."""
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def one(call: Request) -> int:
        async with slots:
            return (await call()).status_code

    return list(await asyncio.gather(*(one(c) for c in calls)))


async def _build(http: httpx.AsyncClient, db: asyncpg.Connection, tx_id: str, n: int) -> None:
    """A live transaction owned by s-A with `n` session events: fenced releases."""
    submitted = await http.post("/v1/transactions", json=_body(tx_id), headers=AGENT)
    assert submitted.status_code == 202, submitted.text
    await _until_projected(db, tx_id, 0)
    releases = [
        _post(http, f"/v1/transactions/{tx_id}/release", _session(tx_id, "agent-B", f"s-f{i}"))
        for i in range(n)
    ]
    statuses = await _gather(releases)
    assert set(statuses) <= {409}, statuses
    await _until_projected(db, tx_id, n)


@dataclass
class Turn:
    intake_ms: float
    postgres_ms: float
    statements: float
    rows: float
    answers: dict[int, int]


async def _turn(postgres: PostgresServer, intake_pid: int, calls: list[Request]) -> Turn:
    await pg_counts.reset(postgres.url)
    assert postgres.pid is not None
    server = sum(pg_server_cost.processes_cpu(postgres.pid).values())
    before = process_seconds(intake_pid)
    statuses = await _gather(calls)
    used = process_seconds(intake_pid) - before
    server = sum(pg_server_cost.processes_cpu(postgres.pid).values()) - server
    calls_counted = pg_counts.per_service(await pg_counts.read(postgres.url))["intake"]
    rows = pg_counts.per_service(await pg_counts.rows(postgres.url))["intake"]
    answers: dict[int, int] = defaultdict(int)
    for status in statuses:
        answers[status] += 1
    n = len(calls)
    return Turn(1000 * used / n, 1000 * server / n, calls_counted / n, rows / n, dict(answers))


def _table(turns: dict[tuple[int, str], list[Turn]], chains: list[int], kinds: list[str]) -> str:
    lines = [
        "N    kind     intake ms/req (median, least)  postgres ms/req  statements/req"
        "  rows/req  answers"
    ]
    for kind in kinds:
        for n in chains:
            got = turns[(n, kind)]
            intake = [t.intake_ms for t in got]
            answers: dict[int, int] = defaultdict(int)
            for t in got:
                for status, count in t.answers.items():
                    answers[status] += count
            lines.append(
                f"{n:<4} {kind:<8} {statistics.median(intake):>8.2f} {min(intake):>8.2f}"
                f"            {statistics.median(t.postgres_ms for t in got):>8.2f}"
                f"        {statistics.median(t.statements for t in got):>8.2f}"
                f"  {statistics.median(t.rows for t in got):>8.1f}"
                f"  {dict(sorted(answers.items()))}"
            )
    return "\n".join(lines)


def _requests(
    http: httpx.AsyncClient, console: httpx.AsyncClient, kind: str, n: int, r: int, count: int
) -> list[Request]:
    """`count` requests of `kind` against the transactions of chain N in round `r`."""
    match kind:
        case "claim":
            return [
                _post(
                    http,
                    f"/v1/transactions/claim-{n}/claim",
                    {"agent_id": "agent-B", "session_id": f"m{r}-{i}"},
                )
                for i in range(count)
            ]
        case "release":
            owner = _session(f"release-{n}", "agent-7", "s-A")
            return [_post(http, f"/v1/transactions/release-{n}/release", owner)] * count
        case "page":
            return [lambda: console.get(f"/console/approvals/claim-{n}/charge")] * count
        case "approve":
            wrong = {"tx_id": f"claim-{n}", "action": "charge", "digest": "0" * 64}
            operator = {"Authorization": f"Bearer {OPERATOR_KEY}"}
            return [_post(http, "/v1/approvals", wrong, operator)] * count
    raise ValueError(kind)


async def run(args: argparse.Namespace) -> None:
    at = args.port_offset
    root = REPO_ROOT / ".cache" / f"session_chain_cost{at or ''}"
    shutil.rmtree(root, ignore_errors=True)
    kafka = KafkaBroker(root / "kafka", 19092 + at, 19093 + at)
    postgres = PostgresServer(root / "postgres", 15432 + at, settings=pg_counts.PRELOAD)
    stack = Stack(
        kafka.bootstrap,
        postgres.url,
        root / "logs",
        intake_port=free_port(),
        sandbox_port=free_port(),
        extra_env={
            "RECON_LOG_LEVEL": "WARNING",
            "RECON_APPROVAL_REQUIRED": "write",
            "RECON_OWNER_LEASE_S": "3600",
        },
        service_env=pg_counts.service_env(postgres.url, RECON_SERVICES),
    )
    print(f"starting Postgres, Kafka and recon in {root} ...", flush=True)
    postgres.start()
    kafka.start()
    try:
        await pg_counts.prepare(postgres.url, RECON_SERVICES)
        stack.start_all()
        await stack.wait_ready()
        db = await asyncpg.connect(postgres.url)
        async with (
            httpx.AsyncClient(base_url=stack.intake_url, timeout=30) as http,
            httpx.AsyncClient(base_url=stack.intake_url, timeout=30) as console,
        ):
            login = await console.post("/console/login", data={"key": OPERATOR_KEY})
            assert login.status_code == 303, login.text
            for n in args.chains:
                await _build(http, db, f"claim-{n}", n)
                await _build(http, db, f"release-{n}", n)
                released = await http.post(
                    f"/v1/transactions/release-{n}/release",
                    json=_session(f"release-{n}", "agent-7", "s-A"),
                    headers=AGENT,
                )
                assert released.status_code == 202, released.text
                await _until_projected(db, f"release-{n}", n + 1, "OwnershipReleased")
                print(f"built N={n}", flush=True)
            intake_pid = stack.processes["intake"].pid
            idle = process_seconds(intake_pid)
            await asyncio.sleep(args.idle)
            idle = process_seconds(intake_pid) - idle
            print(f"intake idle: {1000 * idle / args.idle:.1f} ms of CPU per second")
            turns: dict[tuple[int, str], list[Turn]] = defaultdict(list)
            for r in range(args.rounds):
                order = args.chains if r % 2 == 0 else args.chains[::-1]
                for n in order:
                    for kind in args.kinds:
                        calls = _requests(http, console, kind, n, r, args.requests)
                        turns[(n, kind)].append(await _turn(postgres, intake_pid, calls))
                print(f"round {r} done", flush=True)
        await db.close()
        print(_table(turns, args.chains, args.kinds))
    finally:
        stack.stop_all()
        kafka.stop()
        postgres.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=int, nargs="+", default=[0, 64, 128, 256])
    parser.add_argument("--requests", type=int, default=200, help="per kind, N and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle measured")
    parser.add_argument("--port-offset", type=int, default=0)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
