"""The schema's versions: applying them (`python -m services.cli migrate`) and checking them
(every process at start-up, `require_current`).

The migrations are the files of services/migrations, applied in the order of their names
and recorded in `_yoyo_migration`; a database's version is the number of the last one
applied. The processes never change the schema: one that finds its database behind the
code's version stops with the command to run (`SchemaBehind`), so the runtime role needs no
DDL rights and a large table is never locked by a process restarting under load.

Why yoyo-migrations: the schema is raw SQL, as it was, and yoyo runs SQL files (and Python
ones where a step needs a decision, 0002) in order, per migration in a transaction or,
for CREATE INDEX CONCURRENTLY, outside one (`__transactional__ = False`), and records what
it applied. Alembic wants SQLAlchemy and its models, which recon does not use; plain SQL
files run by a loop of ours would reinvent the record and the ordering. yoyo needs a DB-API
driver: psycopg 3, for this command only; the processes stay on asyncpg.

Concurrent runs (two deploys, or `make run` beside a compose stack) are serialised by a
Postgres session advisory lock, taken before yoyo reads or changes anything: it is released
by Postgres if the runner dies, where yoyo's own lock row would stay behind and block the
next run until someone breaks it, and the second runner waits for the first instead of
giving up after yoyo's ten seconds.

A runner that stops without dying (its process frozen, its host lost or cut off with the
socket open) would keep that lock, and the next run waiting, until the kernel's keepalive
gave up on it (about two hours). So the run's session carries `idle_session_timeout` and
`idle_in_transaction_session_timeout` (IDLE_BOUND_S): once it has sent nothing for that
long, Postgres ends it, and the lock goes with it. A bound on idle is not a bound on work:
a migration's statement that runs long (a CREATE INDEX on a large table, an ALTER TABLE
waiting for a lock) is active, not idle, and is never cut. For the same reason the lock is
held by the session that runs the migrations, not by a guard beside it (yoyo would run each
migration on a connection of its own): the session Postgres ends is the one doing the work,
so a runner cut while its statement still ran cannot go on migrating beside the next one,
and the migration it was inside rolls back (a non-transactional one is left as an
interruption leaves it, which such a migration must survive: see "Writing a migration").
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from projections.held_open import idle_bound_ms
from services.config import DEFAULTS
from services.crash_points import MIGRATE_APPLIED_UNMARKED, crash_point

if TYPE_CHECKING:  # imported when migrating only: the processes never load the driver
    import psycopg

MIGRATIONS = Path(__file__).with_name("migrations")
TABLE = "_yoyo_migration"  # yoyo's record of what it applied
COMMAND = "python -m services.cli migrate"
_LOCK_ID = 0x7265636F6E_4D  # "recon" + "M": one migration run at a time per database
# How pg_locks shows a bigint advisory key: its high and low 32 bits, objsubid 1.
_LOCK_KEY = (_LOCK_ID >> 32, _LOCK_ID & 0xFFFFFFFF)
# A run that sent Postgres nothing for this long has stopped: a live one is idle only between
# its statements (milliseconds of yoyo's and our Python; its progress lines) and while it
# polls for the lock (0.2 s). A minute keeps a migrator frozen by a debugger or a paused VM
# from holding the next run for hours, and is far from any live run's pauses.
IDLE_BOUND_S = 60.0

# What the last release before versioned migrations recorded in `schema_applied` once its
# processes had applied their schema texts (projections, governance, reconciler, console
# sessions): a database holding all four is exactly version 1 and is marked so without
# running 0001 again, which would take an AccessExclusiveLock on tables that release's
# processes may still be writing. A database holding fewer was made by an older release, or
# not every process ran: 0001, idempotent, is run to bring it to version 1.
_RELEASE_BEFORE_VERSIONS = frozenset(
    {
        "869df332b41b164e86ed7963151d3d16be17241a665cf5a9cacab36e384321f7",
        "bde7d8e638a26f5231a8f00d87ffa95a57b0bcd55e90f767dac39fb627539622",
        "df35c2ec0a89bbeedbee3ab4300946194ef6c2a4f1e13c8c730eb4558ad32308",
        "4aeab47e8c18612c7175ffda3640a763a8e4b61880c139f26f6005535c56cc1b",
    }
)
BASELINE = "0001.baseline"


class MigrateError(Exception):
    """The migration run could not start or a migration failed; the message says which."""


class SchemaBehind(Exception):
    """The database is at an older version than this code: `migrate` has not run."""


def migration_ids() -> list[str]:
    """The code's migrations in order, as yoyo names them (the file name without suffix)."""
    names = (p for p in MIGRATIONS.iterdir() if p.suffix in (".sql", ".py"))
    return sorted(p.name.rsplit(".", 1)[0] for p in names if not p.name.startswith("_"))


def version_of(ids: list[str] | set[str]) -> int:
    return max((int(i.split(".", 1)[0]) for i in ids), default=0)


CODE_VERSION = version_of(migration_ids())


def migrate_url() -> str:
    """The migration role's URL: RECON_MIGRATE_DATABASE_URL, else RECON_DATABASE_URL."""
    return (
        os.environ.get("RECON_MIGRATE_DATABASE_URL")
        or os.environ.get("RECON_DATABASE_URL")
        or DEFAULTS["RECON_DATABASE_URL"]
    )


def _yoyo_uri(url: str) -> str:
    # asyncpg's postgres:// and postgresql:// name yoyo's psycopg2 backend; +psycopg is 3.
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise MigrateError(f"not a PostgreSQL URL (postgresql://...): scheme {parts.scheme!r}")
    return urlunsplit(parts._replace(scheme="postgresql+psycopg"))


def redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class Outcome:
    """The database's version before and after the run, and the migrations it applied."""

    before: int
    after: int
    applied: list[str]


def migrate(
    url: str, say: Callable[[str], None] = print, idle_bound_s: float = IDLE_BOUND_S
) -> Outcome:
    """Bring the database at `url` to the code's version, saying what it does. Postgres ends
    the run's session if it sends nothing for `idle_bound_s` (more than 0, at most an hour:
    ValueError otherwise); the run then fails with MigrateError and the next run goes on."""
    import psycopg
    from yoyo import get_backend, read_migrations

    bound = idle_bound_ms(idle_bound_s)
    try:
        # Connects, and creates yoyo's lock table if missing (a harmless race: yoyo ignores
        # "already exists"). Nothing else is read or changed before the lock.
        backend = get_backend(_yoyo_uri(url))
    except psycopg.Error as error:
        # A role without DDL rights also stops here, at yoyo's own tables.
        raise MigrateError(f"cannot start migrating {redacted(url)}: {error}".strip()) from error
    conn: psycopg.Connection[Any] = backend.connection
    try:
        started = time.monotonic()
        # yoyo's connection is in autocommit: the settings are the session's, and no later
        # rollback undoes them.
        conn.execute(
            "SELECT set_config('idle_session_timeout', %s, false),"
            " set_config('idle_in_transaction_session_timeout', %s, false)",
            (bound, bound),
        )
        _lock(conn, say, idle_bound_s)
        baseline = _found_before_versions(conn)
        migrations = read_migrations(str(MIGRATIONS))
        if baseline == "mark":
            say(
                "database made before versioned migrations, at version 1: "
                f"marking {BASELINE} applied"
            )
            backend.mark_migrations([m for m in migrations if m.id == BASELINE])
        elif baseline == "run":
            say(
                "database made by a release older than version 1: running "
                f"{BASELINE} (idempotent) to bring it to version 1"
            )
        before = version_of(_applied(conn))
        pending = backend.to_apply(migrations)
        say(
            f"database {redacted(url)}: at version {before}, code at version "
            f"{CODE_VERSION}, {len(pending)} migration(s) to apply"
        )
        for migration in pending:
            t0 = time.monotonic()
            say(f"  applying {migration.id} ...")
            try:
                _apply(backend, migration)
            except Exception as error:
                if conn.broken:
                    raise MigrateError(_session_ended(error, idle_bound_s)) from error
                raise MigrateError(f"{migration.id} failed: {error}".strip()) from error
            say(f"  applied  {migration.id} in {time.monotonic() - t0:.2f} s")
        after = version_of(_applied(conn))
        took = time.monotonic() - started
        say(f"database at version {after} ({took:.2f} s)")
        return Outcome(before, after, [m.id for m in pending])
    except psycopg.Error as error:
        if conn.broken:
            raise MigrateError(_session_ended(error, idle_bound_s)) from error
        raise MigrateError(f"cannot migrate {redacted(url)}: {error}".strip()) from error
    finally:
        # Closing the session releases the lock; an explicit unlock first says so in the
        # server's view at once, and a session Postgres ended has nothing to release.
        with contextlib.suppress(psycopg.Error):
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
        conn.close()


def _session_ended(error: Exception, idle_bound_s: float) -> str:
    return (
        f"this run's database session was ended ({error}".strip()
        + "). If this process was stopped or lost its network for more than "
        f"{idle_bound_s:.0f} s, Postgres ended its session so that another run could go on, "
        "and the migration it was inside (if any) rolled back. Run migrate again: it applies "
        "whatever is still missing, or says the database is at the code's version"
    )


def _apply(backend: Any, migration: Any) -> None:
    """yoyo's apply_one, on the backend's own connection: yoyo's opens a fresh connection
    for each migration, which would run the migration outside the session holding the lock
    (the session Postgres ends when the run stops).

    And a migration that runs in a transaction is marked applied in that transaction (its
    steps in a savepoint of it). yoyo commits the steps, then marks them in a transaction of
    its own: a run ended between the two (killed, or a stopped run whose session Postgres
    ended at the idle bound) left the migration applied and unmarked, and the next run
    applied it again, which a step like 0006's CREATE TYPE refuses, so the database could not
    be migrated any further. A migration that cannot run in a transaction (CREATE INDEX
    CONCURRENTLY) keeps the two steps, and is written to be applied again (IF NOT EXISTS;
    test_version_7_interrupted_between_its_indexes_is_finished_by_the_next_migrate)."""
    backend.ensure_internal_schema_updated()
    together = backend.transaction() if migration.use_transactions else contextlib.nullcontext()
    with together:
        migration.process_steps(backend, "apply")
        crash_point(MIGRATE_APPLIED_UNMARKED + migration.id)
        backend.log_migration(migration, "apply")
        with backend.transaction():
            backend.mark_one(migration, log=False)


# The session holding the migration lock, as pg_locks and pg_stat_activity show it.
_HOLDER = """
SELECT l.pid, a.client_addr::text, a.application_name, a.state,
       extract(epoch FROM now() - a.state_change)::float8
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s::oid AND l.objid = %s::oid
  AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database
                                       WHERE datname = current_database())
"""


def _holder(conn: psycopg.Connection[Any]) -> tuple[int | None, str]:
    """The lock holder's pid and what Postgres knows of it."""
    row = conn.execute(_HOLDER, _LOCK_KEY).fetchone()
    if row is None:  # it let go between our try and this look
        return None, "a session that has just let go"
    pid, client, application, state, for_s = row
    where = f" from {client}" if client else ""
    name = f" ({application})" if application else ""
    doing = f", {state} for {for_s:.0f} s" if state is not None and for_s is not None else ""
    return pid, f"Postgres pid {pid}{name}{where}{doing}"


def _lock(conn: psycopg.Connection[Any], say: Callable[[str], None], idle_bound_s: float) -> None:
    """Take the migration lock, polling. Waiting inside pg_advisory_lock() would be a
    statement, so a transaction, left open: the holder's CREATE INDEX CONCURRENTLY waits for
    every open transaction to end, and the two would wait on each other through this
    process, where Postgres' deadlock detector cannot see it. Says who holds it, once per
    holder, so that an operator can tell a run that works from one that stopped."""
    said: int | None = None
    while not conn.execute("SELECT pg_try_advisory_lock(%s)", (_LOCK_ID,)).fetchone()[0]:  # type: ignore[index]
        pid, holder = _holder(conn)
        if pid is not None and pid != said:
            say(
                f"another migration run holds this database ({holder}); waiting for it to "
                "finish. A run that stopped (frozen, its host lost) is ended by Postgres "
                f"once it has sent nothing for {idle_bound_s:.0f} s; to end it now: "
                f"SELECT pg_terminate_backend({pid})"
            )
            said = pid
        time.sleep(0.2)


def _applied(conn: psycopg.Connection[Any]) -> set[str]:
    if conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()[0] is None:  # type: ignore[index]
        return set()
    return {row[0] for row in conn.execute(f"SELECT migration_id FROM {TABLE}")}


def _found_before_versions(conn: psycopg.Connection[Any]) -> str | None:
    """'mark' for a database made by the last release before versions, 'run' for an older
    one, None for an empty or already versioned database."""
    tables = conn.execute(
        "SELECT to_regclass(%s), to_regclass('schema_applied'), to_regclass('intents')", (TABLE,)
    ).fetchone()
    assert tables is not None
    versioned, record, intents = tables
    if versioned is not None or (record is None and intents is None):
        return None
    if record is not None:
        digests = {row[0] for row in conn.execute("SELECT digest FROM schema_applied")}
        if _RELEASE_BEFORE_VERSIONS <= digests:
            return "mark"
    return "run"


async def require_current(conn: asyncpg.Connection) -> None:
    """Raise SchemaBehind unless every migration of this code is applied to the database.

    A database ahead of the code (a newer release migrated it, this process is the old one
    still running during a rolling upgrade) is accepted: migrations add, and a release that
    removes something the previous one reads says so in its notes.
    """
    if await conn.fetchval("SELECT to_regclass($1)", TABLE) is None:
        applied: set[str] = set()
    else:
        applied = {row[0] for row in await conn.fetch(f"SELECT migration_id FROM {TABLE}")}
    missing = [m for m in migration_ids() if m not in applied]
    if missing:
        have = version_of(applied)
        raise SchemaBehind(
            f"the database is at schema version {have}, this code needs version "
            f"{CODE_VERSION} (missing: {', '.join(missing)}); run `{COMMAND}` "
            "(with RECON_MIGRATE_DATABASE_URL set to a role that may change the schema, "
            "if the processes' role may not) and start again"
        )
