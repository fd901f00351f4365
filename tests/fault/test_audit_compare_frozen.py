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


async def test_a_compare_frozen_in_its_snapshot_lets_an_alter_table_through_after_the_bound(
    infra: Infra, fresh_database: str, topic_prefix: str, tmp_path: Path
) -> None:
    live_url = fresh_database
    async with new_database(infra, template=infra.template) as rebuilt_url:
        for url in (live_url, rebuilt_url):
            await _project(url, Topics(topic_prefix).events)
        # The two sides agree: what the frozen compare would have found is nothing.
        rebuilt = await asyncpg.connect(rebuilt_url)
        try:
            assert await compare(_settings(live_url, topic_prefix), rebuilt, 1, BOUND_S) == []
        finally:
            await rebuilt.close()

        marker = tmp_path / "paused"
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _COMPARE,
            live_url,
            rebuilt_url,
            topic_prefix,
            str(BOUND_S),
            cwd=REPO_ROOT,
            env={
                **os.environ,
                PAUSE_AT_ENV: AUDIT_COMPARE_IN_SNAPSHOT,
                PAUSE_FILE_ENV: str(marker),
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        admin = await asyncpg.connect(live_url)
        try:
            deadline = time.monotonic() + 60
            while not marker.exists():
                assert process.returncode is None, await process.communicate()
                assert time.monotonic() < deadline, "the compare never reached its snapshot"
                await asyncio.sleep(0.05)
            process.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            # Its snapshot is open: a migration's ALTER TABLE waits on it (and would hold
            # every statement on `events` behind it) until Postgres ends the snapshot.
            holders = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND state = 'idle in transaction' AND pid <> pg_backend_pid()"
            )
            assert holders == 1
            await asyncio.wait_for(
                admin.execute("ALTER TABLE events ADD COLUMN frozen_compare_test int"), 15
            )
            took = time.monotonic() - stopped
            print(f"the ALTER TABLE went through {took:.1f} s after the compare froze")
            assert took >= BOUND_S * 0.9
        finally:
            # Without the bound the snapshot is still held: end it, so the test can end.
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            await admin.close()
            marker.unlink(missing_ok=True)
            process.send_signal(signal.SIGCONT)
        # Thawed, it says what happened and what to do; it wrote nothing.
        out_bytes, err_bytes = await asyncio.wait_for(process.communicate(), 60)
        out, err = out_bytes.decode(), err_bytes.decode()
        print(err)
        assert process.returncode == 2, (out, err)
        assert "the live database ended this compare's read of it" in err, err
        assert "give --into a fresh, empty database" in err, err
        assert "differences" not in out, out
