"""Postgres crashed (kill -9) while transactions run: once it is back, the live projection is
exactly what `audit rebuild` projects from the log, row for row and column for column.

Counting rows would prove nothing here (the events table's primary key and ON CONFLICT DO
NOTHING hide a replay, and a lost batch leaves no trace in a count): the rebuild from offset
0 is the independent answer the live projection must equal.
"""

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from conftest import Infra, _with_database
from support.crash_support import wait_for_log
from support.recon_client import Recon, transaction

from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack


@pytest.fixture
async def rebuild_database(infra: Infra) -> AsyncIterator[str]:
    yield _with_database(infra.database_url, f"t_rebuild_{uuid.uuid4().hex}")


async def test_postgres_crash_mid_run_projection_equals_the_rebuild(
    stack: Stack, recon: Recon, infra: Infra, rebuild_database: str
) -> None:
    postgres = infra.require_postgres()
    before = [f"pg-crash-a{i}" for i in range(10)]
    during = [f"pg-crash-b{i}" for i in range(10)]
    for tx_id in before:
        assert (await recon.submit(transaction(tx_id))).status_code == 202
    for tx_id in before:
        assert (await recon.wait_terminal(tx_id, timeout=120))["status"] == "committed"

    # The intake needs the database to accept a transaction, so the second run is submitted
    # first and kept busy past the crash: each receipt is held a while at the provider, so
    # its events reach the projector while the database is down.
    await recon.arm("email.send", "delay", times=len(during), delay_ms=1000)
    for tx_id in during:
        assert (await recon.submit(transaction(tx_id))).status_code == 202
    await asyncio.to_thread(postgres.kill)
    try:
        # The window is hit: the projector had events in hand and could not store them.
        await wait_for_log(stack, "projector", "records failed; retrying", timeout=60)
    finally:
        await asyncio.to_thread(postgres.start)

    for tx_id in during:
        assert (await recon.wait_terminal(tx_id, timeout=120))["status"] == "committed"
    name = rebuild_database.rsplit("/", 1)[1]
    admin = await asyncpg.connect(infra.database_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        code, out, err = await _audit_rebuild(stack, rebuild_database)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    assert code == 0, (out, err)
    assert "DIFF" not in out and "0 differences" in out, out
    assert "20 transactions" in err, err


async def _audit_rebuild(stack: Stack, into: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "services.cli", "audit", "rebuild", "--into", into, "--compare"),
        cwd=REPO_ROOT,
        env=stack.env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()
