"""`audit rebuild --compare` holds a read-only snapshot of the LIVE database while it reads
it; a compare whose process froze there (SIGSTOP; a host lost with its socket open looks
the same to Postgres) lets a migration's ALTER TABLE through once the snapshot has sat idle
past its bound, and says, once thawed, what happened and what to do
(services.cli.audit_compare's docstring). Real Postgres, a real process stopped at the
compare's pause point inside its snapshot, a 1 s bound."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
from conftest import Infra, new_database
from support.txbuilders import log_of, observed, submit

from events.inputs import Outcome
from events.topics import Topics
from projections.writer import project_batch
from services.cli.audit_compare import compare
from services.config import Settings
from services.crash_points import AUDIT_COMPARE_IN_SNAPSHOT, PAUSE_AT_ENV, PAUSE_FILE_ENV
from services.devtools.infra._process import REPO_ROOT

BOUND_S = 1.0

# The compare as `audit rebuild --compare` runs it once the rebuild is done, with the bound
# given; its AuditError printed as the command prints it, exit 2.
_COMPARE = """
import asyncio, sys
import asyncpg
from events.topics import Topics
from services.cli.audit_compare import compare
from services.cli.log_snapshot import AuditError
from services.config import Settings

async def main() -> int:
    live, rebuilt, prefix, bound = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    settings = Settings("unused:9092", live, Topics(prefix), "dev")
    conn = await asyncpg.connect(rebuilt)
    try:
        print(f"{len(await compare(settings, conn, 1, bound))} differences")
    except AuditError as error:
        print(f"audit: {error}", file=sys.stderr)
        return 2
    finally:
        await conn.close()
    return 0

raise SystemExit(asyncio.run(main()))
"""


def _settings(url: str, prefix: str) -> Settings:
    return Settings("unused:9092", url, Topics(prefix), "dev")


async def _project(url: str, topic: str) -> None:
    log = log_of(
        submit(["reserve", "charge"], ("receipt",)), observed("reserve", 1, Outcome.SUCCEEDED, n=0)
    )
    conn = await asyncpg.connect(url)
    try:
        await project_batch(conn, topic, [(0, i, env) for i, env in enumerate(log)], bulk=True)
    finally:
        await conn.close()


@asynccontextmanager
async def _two_sides(infra: Infra, live_url: str, topic_prefix: str) -> AsyncIterator[str]:
    """A rebuilt database beside the live one, both holding the same projection."""
    async with new_database(infra, template=infra.template) as rebuilt_url:
        for url in (live_url, rebuilt_url):
            await _project(url, Topics(topic_prefix).events)
        yield rebuilt_url


async def _paused_compare(
    live_url: str, rebuilt_url: str, topic_prefix: str, marker: Path
) -> asyncio.subprocess.Process:
    """The compare in a process of its own, once it holds at its pause point inside the
    snapshot, just before its read of `events`."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _COMPARE,
        live_url,
        rebuilt_url,
        topic_prefix,
        str(BOUND_S),
        cwd=REPO_ROOT,
        env={**os.environ, PAUSE_AT_ENV: AUDIT_COMPARE_IN_SNAPSHOT, PAUSE_FILE_ENV: str(marker)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not await asyncio.to_thread(marker.exists):
        assert process.returncode is None, await process.communicate()
        assert time.monotonic() < deadline, "the compare never reached its snapshot"
        await asyncio.sleep(0.05)
    return process


async def _alter_once_frozen(admin: asyncpg.Connection, table: str, stopped: float) -> None:
    """A migration's ALTER TABLE on a table the frozen compare read: it waits on the
    snapshot (and would hold every statement on the table behind it) until Postgres ends
    the compare's session, not before its bound counted from `stopped` (monotonic)."""
    await asyncio.wait_for(
        admin.execute(f"ALTER TABLE {table} ADD COLUMN frozen_compare_test int"), 15
    )
    took = time.monotonic() - stopped
    print(f"the ALTER TABLE {table} went through {took:.1f} s after the compare froze")
    assert took >= BOUND_S * 0.9


async def _thawed(
    process: asyncio.subprocess.Process, admin: asyncpg.Connection, marker: Path | None
) -> tuple[str, str]:
    """Ends whatever the compare still holds (without the bound, so the test can end),
    thaws it and returns what it printed."""
    await admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    if marker is not None:
        await asyncio.to_thread(marker.unlink, missing_ok=True)
    if process.returncode is None:
        process.send_signal(signal.SIGCONT)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    print(err.decode())
    return out.decode(), err.decode()


def _said_ended(process: asyncio.subprocess.Process, out: str, err: str) -> None:
    """It says what happened and what to do; it wrote nothing."""
    assert process.returncode == 2, (out, err)
    assert "the live database ended this compare's read of it" in err, err
    assert "give --into a fresh, empty database" in err, err
    assert "differences" not in out, out


async def test_a_compare_frozen_in_its_snapshot_lets_an_alter_table_through_after_the_bound(
    infra: Infra, fresh_database: str, topic_prefix: str, tmp_path: Path
) -> None:
    live_url = fresh_database
    async with _two_sides(infra, live_url, topic_prefix) as rebuilt_url:
        # The two sides agree: what the frozen compare would have found is nothing.
        rebuilt = await asyncpg.connect(rebuilt_url)
        try:
            assert await compare(_settings(live_url, topic_prefix), rebuilt, 1, BOUND_S) == []
        finally:
            await rebuilt.close()
        marker = tmp_path / "paused"
        process = await _paused_compare(live_url, rebuilt_url, topic_prefix, marker)
        admin = await asyncpg.connect(live_url)
        try:
            process.send_signal(signal.SIGSTOP)
            # Its session went idle at the pause, when the marker was written, not at the
            # SIGSTOP: on a loaded machine the test sees the marker and stops the process
            # a few hundred ms later, and a floor counted from the SIGSTOP failed (0.79 s).
            idle_since = time.monotonic() - (time.time() - marker.stat().st_mtime)
            assert await admin.fetchval(_SEEN + "state = 'idle in transaction'")
            # `transactions`, read already: the snapshot holds its ACCESS SHARE lock.
            await _alter_once_frozen(admin, "transactions", idle_since)
        finally:
            out, err = await _thawed(process, admin, marker)
            await admin.close()
        _said_ended(process, out, err)


async def test_a_compare_frozen_while_postgres_sends_it_rows_lets_an_alter_table_through(
    infra: Infra, fresh_database: str, topic_prefix: str, tmp_path: Path
) -> None:
    # Events of 24 MB each (well over 100 MB in all, far past the sockets' buffers), so that
    # Postgres is still writing them when the compare freezes: its backend is active in
    # ClientWrite, not idle in transaction, and only TCP_USER_TIMEOUT ends it.
    live_url = fresh_database
    async with _two_sides(infra, live_url, topic_prefix) as rebuilt_url:
        for url in (live_url, rebuilt_url):
            conn = await asyncpg.connect(url)
            try:
                await conn.execute(
                    "UPDATE events SET data = data || jsonb_build_object('pad', repeat('x', $1))",
                    24_000_000,
                )
            finally:
                await conn.close()
        admin = await asyncpg.connect(live_url)
        try:
            process, stopped = await _frozen_while_sent_rows(
                admin, live_url, rebuilt_url, topic_prefix, tmp_path / "paused"
            )
            try:
                await _alter_once_frozen(admin, "events", stopped)
            finally:
                out, err = await _thawed(process, admin, None)
        finally:
            await admin.close()
        _said_ended(process, out, err)


_WRITING = "wait_event = 'ClientWrite' AND query LIKE '%FROM events t%'"


async def _frozen_while_sent_rows(
    admin: asyncpg.Connection, live_url: str, rebuilt_url: str, topic_prefix: str, marker: Path
) -> tuple[asyncio.subprocess.Process, float]:
    """A compare held at the pause point just before its read of `events`, let go, and
    frozen (SIGSTOP) as soon as Postgres is seen waiting to write that read's rows to it;
    and when it was frozen. Caught too late (the rest of the rows fitted in the sockets'
    buffers, or it read them all first), the try is started again, up to three times."""
    for _ in range(3):
        process = await _paused_compare(live_url, rebuilt_url, topic_prefix, marker)
        await asyncio.to_thread(marker.unlink)
        while process.returncode is None and not await admin.fetchval(_SEEN + _WRITING):
            pass
        if process.returncode is None:
            process.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            if await admin.fetchval(_SEEN + _WRITING):
                return process, stopped
        print("caught the compare too late; again")
        await _thawed(process, admin, None)
    raise AssertionError("never froze the compare while Postgres was sending it rows")


# Whether a session of the live database other than the test's is seen in a state.
_SEEN = (
    "SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database()"
    " AND pid <> pg_backend_pid() AND "
)
