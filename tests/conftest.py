"""Shared fixtures. Kafka and Postgres start only when a test asks for `infra` (or a fixture
built on it), so unit tests run on machines without Java or a database."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from hypothesis import HealthCheck, settings

from services.devtools.infra._process import REPO_ROOT
from services.devtools.infra.kafka import KafkaBroker
from services.devtools.infra.postgres import PostgresServer
from services.devtools.ports import free_port as _free_port

# Every process the suite starts (~75 whole stacks of seven, deciders, CLIs, the sandbox)
# imports recon and its libraries again. With PYTHONDONTWRITEBYTECODE set (as in the
# environment this suite ran in under CI) each compiled every module from source: a stack's
# processes spent ~40 % of their start-up CPU compiling (docs/testing.md). They write their
# bytecode under .cache/pycache instead (ignored by git, out of the source directories), so
# each module is compiled once per checkout.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(REPO_ROOT / ".cache" / "pycache"))
    # And this process too, for what it imports from here on (the test modules, recon's
    # own, the libraries they import, pytest's rewritten asserts): xdist's workers start
    # with the environment above, but a run without -n is this one process, which
    # compiled all of it from source at each run.
    sys.dont_write_bytecode = False
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]

# Hypothesis profiles. `ci` (the default, so `make test` and CI run it) is derandomized:
# every run draws the same examples, the seed derived from each test's source, so a red run
# is reproducible and a green one is not luck; the profile is printed in pytest's header.
# `random` draws new examples each run (--hypothesis-seed=N replays one); `deep` is
# `make properties`: many more examples on random seeds. No example database in ci or
# random, so a run does not depend on what an earlier one found.
_ANY_MACHINE = [HealthCheck.too_slow]  # generation time depends on the machine's load
settings.register_profile(
    "ci",
    max_examples=100,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=_ANY_MACHINE,
)
settings.register_profile(
    "random",
    settings.get_profile("ci"),
    derandomize=False,
)
settings.register_profile(
    "deep",
    settings.get_profile("random"),
    max_examples=2000,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _profile_line() -> str:
    name = settings.get_current_profile_name()
    current = settings.get_profile(name)
    changed = current.show_changed()  # lists max_examples only when it is not the default
    if "max_examples" not in changed:
        changed = f"max_examples={current.max_examples}, {changed}"
    return f"hypothesis profile {name!r}: {changed}"


def pytest_report_header() -> str:
    return _profile_line()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # Under -q (make test) there is no header: say which examples ran at the end instead.
    if terminalreporter.verbosity < 0:
        terminalreporter.write_line(_profile_line())


@dataclass
class Infra:
    kafka_bootstrap: str
    database_url: str
    # None when the environment points the tests at infrastructure they do not control.
    kafka: KafkaBroker | None
    postgres: PostgresServer | None
    # A database at the code's schema version that `fresh_database` copies (services.migrate).
    template: str = ""

    def require_kafka(self) -> KafkaBroker:
        if self.kafka is None:
            skip_or_fail("Kafka comes from RECON_KAFKA_BOOTSTRAP; it cannot be restarted here")
        return self.kafka

    def require_postgres(self) -> PostgresServer:
        if self.postgres is None:
            skip_or_fail("Postgres comes from RECON_DATABASE_URL; it cannot be restarted here")
        return self.postgres

    def restart_kafka(self) -> None:
        self.require_kafka().restart()

    def restart_postgres(self) -> None:
        self.require_postgres().restart()


def skip_or_fail(reason: str) -> NoReturn:
    """Skip on a developer's machine; fail under CI (CI set), where every test must run: a
    restart test skipped there would be a promise silently left unchecked."""
    if os.environ.get("CI"):
        pytest.fail(f"would skip under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Lets `pytest -m "not infra"` select exactly the tests that need no broker or database.
    for item in items:
        if "infra" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.infra)


@pytest.fixture(scope="session")
def infra() -> Iterator[Infra]:
    bootstrap = os.environ.get("RECON_KAFKA_BOOTSTRAP")
    database_url = os.environ.get("RECON_DATABASE_URL")
    if bootstrap and database_url:
        template = _migrated_template(database_url)
        try:
            yield Infra(bootstrap, database_url, kafka=None, postgres=None, template=template)
        finally:
            _drop_database(database_url, template)
        return

    root = REPO_ROOT / ".cache" / "test-infra" / str(os.getpid())
    shutil.rmtree(root, ignore_errors=True)
    postgres = PostgresServer(root / "postgres", _free_port())
    kafka = KafkaBroker(root / "kafka", _free_port(), _free_port())
    try:
        postgres.start()
        kafka.start()
        template = _migrated_template(postgres.url)
        yield Infra(
            kafka.bootstrap, postgres.url, kafka=kafka, postgres=postgres, template=template
        )
    finally:
        # Killed, not stopped: its data is deleted next, and a controlled shutdown of a broker
        # holding every test's topics took 40-60 s at the end of each worker's run, after its
        # last test (the whole suite under load, both workers' closing teardowns).
        kafka.kill()
        postgres.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def kafka_bootstrap(infra: Infra) -> str:
    return infra.kafka_bootstrap


@pytest.fixture
def database_url(infra: Infra) -> str:
    return infra.database_url


@pytest.fixture
def kafka_broker(infra: Infra) -> KafkaBroker:
    """The test session's own broker, for restart and crash tests (skips if external)."""
    return infra.require_kafka()


@pytest.fixture
def postgres_server(infra: Infra) -> PostgresServer:
    """The test session's own Postgres, for restart and crash tests (skips if external)."""
    return infra.require_postgres()


def _with_database(url: str, database: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


def _migrated_template(url: str) -> str:
    """Migrate the session's database (tests that use it directly find the schema there, as
    processes started by `make run` do) and a template for `fresh_database`: one migration
    run per session, a copy per test, rather than one run per test."""
    import psycopg

    from services.migrate import migrate

    def quiet(line: str) -> None:
        return None

    migrate(url, quiet)
    name = f"recon_template_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    migrate(_with_database(url, name), quiet)
    return name


def _drop_database(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def fresh_database(infra: Infra) -> AsyncIterator[str]:
    """URL of a new database at the code's schema version, with no rows, dropped after the
    test (a copy of the session's migrated template)."""
    async with new_database(infra, template=infra.template) as url:
        yield url


@pytest.fixture
async def conn(fresh_database: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to a `fresh_database`, closed after the test (a test file whose
    connection needs more, e.g. rows seeded, defines its own `conn`)."""
    connection = await asyncpg.connect(fresh_database)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def empty_database(infra: Infra) -> AsyncIterator[str]:
    """URL of a new database without any table, dropped after the test: for what migrations
    or an older release build."""
    async with new_database(infra, template="") as url:
        yield url


@asynccontextmanager
async def new_database(infra: Infra, template: str) -> AsyncIterator[str]:
    name = f"t_{uuid.uuid4().hex}"
    admin = await asyncpg.connect(infra.database_url)
    try:
        copy = f' TEMPLATE "{template}"' if template else ""
        await admin.execute(f'CREATE DATABASE "{name}"{copy}')
    finally:
        await admin.close()
    try:
        yield _with_database(infra.database_url, name)
    finally:
        try:
            # The test may have restarted Postgres, so reconnect rather than reuse one.
            admin = await asyncpg.connect(infra.database_url)
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await admin.close()
        except (OSError, asyncpg.PostgresError):
            pass


@pytest.fixture
def topic_prefix(request: pytest.FixtureRequest) -> Iterator[str]:
    """A prefix that keeps each test's topics apart on a shared broker; on the session's own
    broker they are deleted after the test (its processes have stopped by then: every fixture
    that starts one asks for this prefix first, so is torn down before it)."""
    prefix = new_topic_prefix()
    yield prefix
    if "infra" in request.fixturenames:
        drop_topics(request.getfixturevalue("infra"), prefix)


def new_topic_prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}."


def drop_topics(infra: Infra, prefix: str) -> None:
    """The prefix's topics deleted, on the session's own broker only (an external one is
    not this suite's to tidy), and only while it runs (a test may have killed it)."""
    if infra.kafka is not None and infra.kafka.is_running():
        delete_topics(infra.kafka_bootstrap, prefix)


def delete_topics(bootstrap: str, prefix: str) -> None:
    """A broker holding every finished test's topics (~12 of 4 partitions per stack, ~840 by
    a worker's last tests) made each restart inside a test dear: a graceful stop closes and
    flushes every partition's log one after another (4.9 s for 840 topics on a quiet
    machine, 30 s, the stop timeout, under load), and a start after a kill recovers each one
    (docs/testing.md, "The suite's wall time"). In a thread of its own: the session's event
    loop may be running."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    async def delete() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            names = [name for name in await admin.list_topics() if name.startswith(prefix)]
            if names:
                await admin.delete_topics(names)
        finally:
            await admin.close()

    with ThreadPoolExecutor(1) as thread:
        try:
            thread.submit(asyncio.run, delete()).result()
        except (KafkaError, OSError):
            pass  # housekeeping only: a broker the test left unreachable keeps them


@pytest.fixture
def free_port() -> Callable[[], int]:
    """Hands out ports nobody listens on, for the processes a test starts."""
    return _free_port


# Kafka clients collected unstopped are reported at the end of the test they were collected in
# (support/kafka_leaks.py).
pytest_plugins = ["support.kafka_leaks"]

# The whole recon stack as real processes (stack, recon).
from support.sandbox_process import client, sandbox  # noqa: E402, F401
from support.stack_fixtures import (  # noqa: E402, F401
    disarmed,
    recon,
    stack,
    stack_with,
    two_tenants,
)
