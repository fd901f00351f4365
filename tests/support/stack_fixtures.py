"""Fixtures that start the whole recon stack as real processes, per test or per module."""

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import Infra, drop_topics, new_database, new_topic_prefix

from services.devtools.ports import free_port as a_free_port
from services.devtools.stack import SERVICES, Stack
from support.recon_client import Recon


@asynccontextmanager
async def running_stack(
    infra: Infra,
    database_url: str,
    topic_prefix: str,
    log_dir: Path,
    port: Callable[[], int],
    *,
    migrate: bool = True,
    **env: str,
) -> AsyncIterator[Stack]:
    """Every recon process and the sandbox, ready; stopped (their log tails printed) after.
    `migrate=False` for a copy of the session's migrated template (conftest's
    fresh_database): the migrate step would find nothing to do there, and its Python start
    held up the stack by 0.9-1.2 s (migrating twice is test_migrations' own case)."""
    stack = Stack(
        kafka_bootstrap=infra.kafka_bootstrap,
        database_url=database_url,
        log_dir=log_dir,
        topic_prefix=topic_prefix,
        intake_port=port(),
        sandbox_port=port(),
        migrate=migrate,
        # Short provider timeout: a lost response becomes `unknown` quickly.
        extra_env={"RECON_PROVIDER_TIMEOUT_S": "2", **env},
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


# The `stack` fixture's environment, per test or per module. A deployment admin key (README
# "Drift"): the one key that sees tenant-less drift in full.
STACK_ENV = {"RECON_LOG_LEVEL": "INFO", "RECON_ADMIN_KEYS": "admin-key=ada"}


@pytest.fixture
async def stack(
    infra: Infra,
    fresh_database: str,
    topic_prefix: str,
    tmp_path: Path,
    free_port: Callable[[], int],
) -> AsyncIterator[Stack]:
    logs = tmp_path / "logs"
    async with running_stack(
        infra, fresh_database, topic_prefix, logs, free_port, migrate=False, **STACK_ENV
    ) as stack:
        yield stack


@asynccontextmanager
async def stack_of_its_own(infra: Infra, logs: Path, **env: str) -> AsyncIterator[Stack]:
    """A stack on a database and topics made for it, which go with it once its processes
    have stopped: for a stack that outlives a test (a module's), which the per-test
    fixtures' database and topic prefix would not follow. Left behind, each such stack's
    topics stayed on the session's broker for every later restart of it to close and
    recover (docs/testing.md, "The suite's wall time"), and its database until the run's
    end."""
    prefix = new_topic_prefix()
    try:
        async with new_database(infra, template=infra.template) as database_url:
            async with running_stack(
                infra, database_url, prefix, logs, a_free_port, migrate=False, **env
            ) as stack:
                yield stack
    finally:
        drop_topics(infra, prefix)


# Any: the type pytest.fixture returns (FixtureFunctionDefinition) is private to pytest.
def module_stack_with(**env: str) -> Any:
    """A module-scoped fixture: the `stack` fixture's stack with `env` added, started once
    for a whole test module that says `stack = module_stack_with(...)` (or `stack =
    module_stack`, with nothing added): a stack's start is ~5-10 s of the suite's two
    cores, most of a short test's cost (docs/testing.md, "The suite's wall time"). Only for
    tests that share it without seeing each other's work: each its own transaction ids,
    none counting every row, effect or record, none relying on a table or a log being
    empty, a fault armed at the sandbox disarmed after each test, and no process frozen,
    or killed or stopped without its successor ready before the test goes on (a module's
    tests run in any order, pytest-randomly's). Under xdist a module split over both
    workers starts one on each."""

    @pytest.fixture(scope="module")
    async def module_stack(
        infra: Infra, tmp_path_factory: pytest.TempPathFactory
    ) -> AsyncIterator[Stack]:
        logs = tmp_path_factory.mktemp("stack") / "logs"
        async with stack_of_its_own(infra, logs, **{**STACK_ENV, **env}) as stack:
            yield stack

    return module_stack


module_stack = module_stack_with()


StackWith = Callable[..., AbstractAsyncContextManager[tuple[Stack, Recon]]]


@pytest.fixture
def stack_with(
    infra: Infra,
    fresh_database: str,
    topic_prefix: str,
    tmp_path: Path,
    free_port: Callable[[], int],
) -> StackWith:
    """`async with stack_with(RECON_X="...") as (stack, recon)`: the whole stack with extra
    environment for every process, and a client of it (closed after)."""

    @asynccontextmanager
    async def start(**env: str) -> AsyncIterator[tuple[Stack, Recon]]:
        logs = tmp_path / "logs"
        async with running_stack(
            infra, fresh_database, topic_prefix, logs, free_port, migrate=False, **env
        ) as s:
            recon = Recon(s.intake_url, s.sandbox_url)
            try:
                yield s, recon
            finally:
                await recon.close()

    return start


# Tenants `demo` (demo-key, operator ops-key) and `other` (other-key, operator
# other-ops-key); the pull reconciler stays out of the way, since these tests request their
# reviews themselves.
TWO_TENANTS_ENV = {
    "RECON_API_KEYS": "demo-key=demo,other-key=other",
    "RECON_OPERATOR_KEYS": "ops-key=demo:operator,other-ops-key=other:mallory",
    "RECON_RECONCILE_AFTER_S": "600",
}


@pytest.fixture
async def two_tenants(stack_with: StackWith) -> AsyncIterator[tuple[Stack, Recon]]:
    """The whole stack with TWO_TENANTS_ENV, and a client of it as demo-key."""
    async with stack_with(**TWO_TENANTS_ENV) as pair:
        yield pair


@pytest.fixture
async def disarmed(recon: Recon) -> AsyncIterator[None]:
    """The sandbox's faults dropped after the test (its DELETE /v1/faults): for a module on
    one stack (module_stack), `pytestmark = pytest.mark.usefixtures("disarmed")`. A fault
    a test armed and no call consumed (the test failed first) would hit the next test's
    calls."""
    yield
    await recon.disarm()


@pytest.fixture
async def recon(stack: Stack) -> AsyncIterator[Recon]:
    client = Recon(stack.intake_url, stack.sandbox_url)
    yield client
    await client.close()
