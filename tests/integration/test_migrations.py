"""Versioned migrations against a real Postgres (services.migrate, services/migrations).

A database made by the last release before versions is recognised and upgraded with its
rows kept; migrating again changes nothing; runs at the same moment apply each migration
once; a process refuses a database behind the code's version, naming the command.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from conftest import Infra
from support import release_before_migrations
from support.recon_client import Recon, transaction
from support.stack_fixtures import running_stack
from support.txbuilders import log_of, observed, request_review, submit

from events.inputs import Outcome
from events.policy import PolicyDocument
from projections.writer import Record, project_batch
from services.crash_points import CRASH_ENV, CRASH_EXIT_CODE, MIGRATE_APPLIED_UNMARKED
from services.devtools.infra._process import REPO_ROOT
from services.governance import store
from services.intake.console.sessions import open_session
from services.migrate import CODE_VERSION, TABLE, migrate, migration_ids
from services.migrate import Outcome as Migrated

# Every table of version 1 but the start-up record version 3 drops.
TABLES = (
    "intents", "events", "transactions", "operations", "projection_offsets", "reviews",
    "review_resolutions", "drift", "webhook_deliveries", "intent_keys", "natural_keys",
    "governance_policies", "kill_switches", "quota_claims", "quota_breakers",
    "held_dispatches", "previews", "calls_begun", "reconciler_leases",
    "reconciler_drift_reported", "console_sessions",
)  # fmt: skip


def _quiet(line: str) -> None:
    return None


async def _migrate(url: str, lines: list[str] | None = None) -> Migrated:
    say = lines.append if lines is not None else _quiet
    return await asyncio.to_thread(migrate, url, say)


async def _rows(conn: asyncpg.Connection) -> dict[str, tuple[int, str | None]]:
    """Each table's row count and a digest of its rows, whatever their columns: a column a
    migration adds empty (NULL, version 9's lease) leaves the digest as it was."""
    row = "jsonb_strip_nulls(to_jsonb(t))::text"
    return {
        table: tuple(
            await conn.fetchrow(
                f"SELECT count(*), md5(string_agg({row}, '|' ORDER BY {row})) FROM {table} t"
            )
        )
        for table in TABLES
    }


# The columns of `transactions` today's writer writes that a database before version 14
# lacks: a transaction's owner and count of session commands.
_SESSION_COLUMNS = {"owner": "jsonb", "session_events": "integer", "session_seq": "integer"}


async def _project_as_written_then(conn: asyncpg.Connection, records: list[Record]) -> None:
    """The rows as the writer of the database's release wrote them. By COPY, audit rebuild's
    path: the live statement's row types (0006) may not be there yet, and the rows are the
    same (tests/integration/test_projection_batch_types.py). Into a database before
    version 14, today's writer writes its session columns too: they are added for the
    write, then dropped with what it wrote there."""
    before_14 = await conn.fetchval(
        "SELECT NOT EXISTS (SELECT FROM information_schema.columns"
        " WHERE table_name = 'transactions' AND column_name = 'session_seq')"
    )
    if before_14:
        added = (f"ADD COLUMN {c} {t}" for c, t in _SESSION_COLUMNS.items())
        await conn.execute("ALTER TABLE transactions " + ", ".join(added))
    await project_batch(conn, "recon.events", records, bulk=True)
    if before_14:
        dropped = (f"DROP COLUMN {c}" for c in _SESSION_COLUMNS)
        await conn.execute("ALTER TABLE transactions " + ", ".join(dropped))


async def _representative_rows(conn: asyncpg.Connection) -> None:
    """Rows as that release's processes wrote them: a projected transaction with a review,
    an intent, a policy, a kill switch, a held dispatch, a console session, a lease."""
    log = log_of(
        submit(["reserve", "charge"], ("receipt",)),
        observed("reserve", 1, Outcome.SUCCEEDED, n=0),
        observed("charge", 1, Outcome.UNKNOWN, n=1),
        request_review("charge", 1),
    )
    await _project_as_written_then(conn, [(0, i, env) for i, env in enumerate(log)])
    await conn.execute(
        "INSERT INTO intents (tenant, tx_id, fingerprint, agent_id, operations, produced)"
        " VALUES ('demo', 'tx-upgrade', 'fp', 'agent-7', '[]', true)"
    )
    policy = {"version": 1, "agents": {"agent-7": {"grants": ["payments.charge"]}}}
    assert await store.replace_policy(conn, "demo", PolicyDocument.model_validate(policy), "ops")
    await store.engage(conn, "sw-1", "demo", {"agent": "agent-9"}, "runaway agent", "ops")
    await open_session(conn, "demo", "ada")
    await conn.execute(
        "INSERT INTO reconciler_leases (op_key, attempt, lookups, next_at, review_requests)"
        " VALUES ('k1', 1, 2, now(), 1)"
    )
    await conn.execute(
        "INSERT INTO calls_begun (tenant, op_key, leg, attempt) VALUES ('demo', 'k1', 'forward', 1)"
    )


async def _applied(conn: asyncpg.Connection) -> list[tuple[str, Any]]:
    rows = await conn.fetch(f"SELECT migration_id, applied_at_utc FROM {TABLE} ORDER BY 1")
    return [(r["migration_id"], r["applied_at_utc"]) for r in rows]


async def test_a_database_made_by_the_release_before_versions_is_upgraded_with_its_rows(
    empty_database: str,
) -> None:
    conn = await asyncpg.connect(empty_database)
    try:
        await release_before_migrations.build(conn)
        await _representative_rows(conn)
        before = await _rows(conn)

        lines: list[str] = []
        outcome = await _migrate(empty_database, lines)

        # Recognised as version 1 and marked, not run again: its ALTER TABLEs would lock
        # tables that release's processes may still be writing.
        assert any("at version 1: marking 0001.baseline applied" in line for line in lines)
        assert outcome.before == 1 and outcome.after == CODE_VERSION
        assert outcome.applied == migration_ids()[1:]
        assert await _rows(conn) == before
        assert [m for m, _ in await _applied(conn)] == migration_ids()
        # Its rows hold no owner or count: the intake folds their chains (0014).
        assert await conn.fetchval("SELECT count(session_seq) FROM transactions") == 0
        # The compensation's indexes (version 2's, replaced by version 7's partial ones)
        # are there and valid (built CONCURRENTLY), the replaced ones gone.
        index = "SELECT indisvalid FROM pg_index WHERE indexrelid = $1::regclass"
        assert await conn.fetchval(index, "operations_comp_dispatched")
        assert await conn.fetchval(index, "operations_comp_key_set")
        gone = "SELECT to_regclass($1) IS NULL"
        assert await conn.fetchval(gone, "operations_comp_state")
        assert await conn.fetchval(gone, "operations_comp_op_key")
        assert await conn.fetchval("SELECT to_regclass('schema_applied')") is None
    finally:
        await conn.close()
    # Something was really there to keep.
    assert before["events"][0] >= 4 and before["intents"][0] == 1 and before["reviews"][0] == 1


async def test_a_database_where_only_the_projector_ran_gets_the_rest_of_version_1(
    empty_database: str,
) -> None:
    # An older release, or a stack where not every process had started: not every digest is
    # there, so the idempotent version 1 is run, keeping the rows and adding the tables.
    conn = await asyncpg.connect(empty_database)
    try:
        await release_before_migrations.build(conn, ("projections",))
        log = log_of(submit(["charge"]), observed("charge", 1, Outcome.SUCCEEDED, n=0))
        await _project_as_written_then(conn, [(0, i, env) for i, env in enumerate(log)])
        events = await conn.fetch("SELECT * FROM events ORDER BY seq")

        lines: list[str] = []
        outcome = await _migrate(empty_database, lines)

        assert any("running 0001.baseline (idempotent)" in line for line in lines)
        assert outcome.after == CODE_VERSION
        assert await conn.fetch("SELECT * FROM events ORDER BY seq") == events
        assert await conn.fetchval("SELECT to_regclass('kill_switches')") is not None
    finally:
        await conn.close()


async def test_migrating_twice_changes_nothing(empty_database: str) -> None:
    first = await _migrate(empty_database)
    assert (first.before, first.after, first.applied) == (0, CODE_VERSION, migration_ids())
    conn = await asyncpg.connect(empty_database)
    try:
        applied = await _applied(conn)
        lines: list[str] = []
        second = await _migrate(empty_database, lines)
        assert (second.before, second.after, second.applied) == (CODE_VERSION, CODE_VERSION, [])
        assert await _applied(conn) == applied
        assert any("0 migration(s) to apply" in line for line in lines)
    finally:
        await conn.close()


async def test_version_7_interrupted_between_its_indexes_is_finished_by_the_next_migrate(
    empty_database: str,
) -> None:
    # Version 7 builds each partial index concurrently, then drops the whole one it replaces,
    # outside a transaction: a crash leaves some built, a build cut short (an INVALID index
    # under the new name) and the old ones in place, with version 7 not recorded.
    await _migrate(empty_database)
    conn = await asyncpg.connect(empty_database)
    try:
        await _representative_rows(conn)  # two operations of one tenant
        [version_7] = [m for m in migration_ids() if m.startswith("0007")]
        await conn.execute(f"DELETE FROM {TABLE} WHERE migration_id = $1", version_7)
        await conn.execute("CREATE INDEX operations_comp_op_key ON operations (comp_op_key)")
        await conn.execute(
            "CREATE INDEX operations_comp_state ON operations (comp_state)"
            " WHERE comp_op_key IS NOT NULL"
        )
        await conn.execute("DROP INDEX operations_comp_dispatched")
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY operations_comp_dispatched ON operations (tenant)"
            )
        valid = "SELECT indisvalid FROM pg_index WHERE indexrelid = $1::regclass"
        assert await conn.fetchval(valid, "operations_comp_dispatched") is False

        outcome = await _migrate(empty_database)

        assert outcome.applied == [version_7]
        assert await conn.fetchval(valid, "operations_comp_key_set")
        assert await conn.fetchval(valid, "operations_comp_dispatched")
        definition = await conn.fetchval(
            "SELECT pg_get_indexdef($1::regclass)", "operations_comp_dispatched"
        )
        assert "(comp_state) WHERE ((comp_op_key IS NOT NULL) AND" in definition, definition
        gone = "SELECT to_regclass($1) IS NULL"
        assert await conn.fetchval(gone, "operations_comp_op_key")
        assert await conn.fetchval(gone, "operations_comp_state")
    finally:
        await conn.close()


async def test_a_run_killed_between_a_migration_and_its_mark_leaves_neither(
    empty_database: str,
) -> None:
    # Version 6 makes types (CREATE TYPE has no IF NOT EXISTS): applied but not marked, the
    # next run would apply it again and fail there, the database stuck at version 5.
    [version_6] = [m for m in migration_ids() if m.startswith("0006")]
    killed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "services.cli", "migrate"],
        cwd=REPO_ROOT,
        env={
            **os.environ,
            "RECON_DATABASE_URL": empty_database,
            CRASH_ENV: MIGRATE_APPLIED_UNMARKED + version_6,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == CRASH_EXIT_CODE, killed.stdout + killed.stderr
    assert f"applying {version_6}" in killed.stdout, killed.stdout
    conn = await asyncpg.connect(empty_database)
    try:
        assert version_6 not in [m for m, _ in await _applied(conn)]
        made = "SELECT count(*) FROM pg_type WHERE typname = 'events_batch_v1'"
        assert await conn.fetchval(made) == 0  # rolled back with the mark it never got

        outcome = await _migrate(empty_database)

        assert outcome.applied[0] == version_6 and outcome.after == CODE_VERSION, outcome
        assert await conn.fetchval(made) == 1
    finally:
        await conn.close()


async def test_migrations_run_at_the_same_moment_apply_each_migration_once(
    empty_database: str,
) -> None:
    # Two deploys, or `make run` beside a compose stack: the advisory lock makes one wait.
    outcomes = await asyncio.gather(*(_migrate(empty_database) for _ in range(4)))
    applied = sorted(m for outcome in outcomes for m in outcome.applied)
    assert applied == migration_ids()
    assert {outcome.after for outcome in outcomes} == {CODE_VERSION}
    conn = await asyncpg.connect(empty_database)
    try:
        assert [m for m, _ in await _applied(conn)] == migration_ids()
    finally:
        await conn.close()


def _process(module: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize("module", ["services.projector", "services.intake", "services.cli"])
async def test_a_process_refuses_a_database_behind_the_code(
    infra: Infra,
    fresh_database: str,
    topic_prefix: str,
    free_port: Callable[[], int],
    module: str,
) -> None:
    # The database a release behind: the last migration not applied yet.
    last = migration_ids()[-1]
    conn = await asyncpg.connect(fresh_database)
    try:
        await conn.execute(f"DELETE FROM {TABLE} WHERE migration_id = $1", last)
    finally:
        await conn.close()
    env = {
        "RECON_DATABASE_URL": fresh_database,
        "RECON_KAFKA_BOOTSTRAP": infra.kafka_bootstrap,
        "RECON_TOPIC_PREFIX": topic_prefix,
        "RECON_INTAKE_PORT": str(free_port()),
        "RECON_METRICS_PORT": str(free_port()),
    }
    process = _process(module, env, *(["drift"] if module == "services.cli" else []))
    try:
        out, _ = await asyncio.to_thread(process.communicate, timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        pytest.fail(f"{module} did not refuse the database behind; it ran:\n{out[-2000:]}")
    assert process.returncode == 2, out
    assert (
        f"the database is at schema version {CODE_VERSION - 1}, this code needs version "
        f"{CODE_VERSION} (missing: {last}); run `python -m services.cli migrate`"
    ) in out, out


async def test_the_stack_runs_on_a_runtime_role_without_ddl_rights(
    infra: Infra,
    empty_database: str,
    topic_prefix: str,
    tmp_path: Path,
    free_port: Callable[[], int],
) -> None:
    # docs/operations.md's grants, as written there: the migrate step runs as the owner
    # (RECON_MIGRATE_DATABASE_URL), every process as a role that may only read and write rows.
    role = f"r_{uuid.uuid4().hex[:12]}"
    database = urlsplit(empty_database).path.lstrip("/")
    owner = await asyncpg.connect(empty_database)
    try:
        await owner.execute(f"CREATE ROLE {role} LOGIN")
        await owner.execute(f'GRANT CONNECT, TEMPORARY ON DATABASE "{database}" TO {role}')
        await owner.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        await owner.execute(
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public"
            f" GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}"
        )
        parts = urlsplit(empty_database)
        runtime = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rsplit('@', 1)[1]}"))
        try:
            async with running_stack(
                infra,
                runtime,
                topic_prefix,
                tmp_path / "logs",
                free_port,
                RECON_MIGRATE_DATABASE_URL=empty_database,
            ) as stack:
                recon = Recon(stack.intake_url, stack.sandbox_url)
                try:
                    accepted = await recon.submit(transaction("runtime-role-1"))
                    assert accepted.status_code == 202, accepted.text
                    tx = await recon.wait_terminal("runtime-role-1")
                    assert tx["status"] == "committed", tx
                finally:
                    await recon.close()
            # The role really could not have changed the schema.
            as_runtime = await asyncpg.connect(runtime)
            try:
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await as_runtime.execute("ALTER TABLE intents ADD COLUMN nope text")
            finally:
                await as_runtime.close()
            assert "applying 0001.baseline" in stack.log_tail("migrate", 50)
            # The deciders' takes wrote their call fences as the role, with their cluster
            # (registered in kafka_clusters, whose arrival comes from a sequence).
            assert await owner.fetchval(
                "SELECT count(*) FROM call_fences f JOIN kafka_clusters k USING (arrival)"
            )
        finally:
            await owner.execute(f"DROP OWNED BY {role}")
    finally:
        await owner.close()
    admin = await asyncpg.connect(infra.database_url)
    try:
        # Its privileges went with the test's database: only the role is left to drop.
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
    finally:
        await admin.close()
