"""Fixtures that start the whole recon stack as real processes, per test."""

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from conftest import Infra

from services.devtools.stack import SERVICES, Stack
from support.recon_client import Recon


@pytest.fixture
async def stack(
    infra: Infra,
    fresh_database: str,
    topic_prefix: str,
    tmp_path: Path,
    free_port: Callable[[], int],
) -> AsyncIterator[Stack]:
    stack = Stack(
        kafka_bootstrap=infra.kafka_bootstrap,
        database_url=fresh_database,
        log_dir=tmp_path / "logs",
        topic_prefix=topic_prefix,
        intake_port=free_port(),
        sandbox_port=free_port(),
        # Short provider timeout: a lost response becomes `unknown` quickly.
        extra_env={"RECON_PROVIDER_TIMEOUT_S": "2", "RECON_LOG_LEVEL": "INFO"},
    )
    stack.start_all()
    try:
        await stack.wait_ready()
        yield stack
    finally:
        stack.stop_all()
        for name in (*SERVICES, "decider-2"):
            tail = stack.log_tail(name, 15)
            if tail:
                print(f"--- {name} ---\n{tail}")


@pytest.fixture
async def recon(stack: Stack) -> AsyncIterator[Recon]:
    client = Recon(stack.intake_url, stack.sandbox_url)
    yield client
    await client.close()
