"""Kafka clients left unstopped: asked by a test while it holds them (`unstopped`), and
reported for the whole run at each test's teardown (registered in tests/conftest.py).

aiokafka says so of a client made and never stopped only when it is collected: a
ResourceWarning (ignored by default) and an ERROR on the `asyncio` logger (`Unclosed
AIOKafkaProducer`) through the loop's exception handler. Collection comes late, in whichever
test runs then or at the worker's exit, and pytest keeps the log of neither: the runs ended
with the last few printed by each worker as it exited, the rest never seen
(docs/testing.md, "Kafka clients left unstopped")."""

from __future__ import annotations

import gc
import logging
import warnings
from collections.abc import Generator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

# aiokafka's reports of its clients. Not of its connections (`Unclosed AIOKafkaConnection`):
# a client's start cancelled while bootstrapping leaves its bootstrap connection inside
# aiokafka (AIOKafkaClient.bootstrap closes it on errors, not on cancellation), out of
# recon's reach; collected, it is closed (seen twice in test_list_pages, an intake stopped
# while its group watch's reader started).
UNCLOSED = ("Unclosed AIOKafkaProducer", "Unclosed AIOKafkaConsumer")


def unstopped(
    client_id: str,
) -> list[AIOKafkaConsumer | AIOKafkaProducer | AIOKafkaAdminClient]:
    """The clients named `client_id` alive and not stopped (a client never started counts:
    aiokafka warns of it too). Admin clients count as well, though aiokafka says nothing
    of one left open: it keeps its connections and metadata task just the same."""
    gc.collect()  # garbage already is no longer anyone's to stop (aiokafka logs it)
    found: list[AIOKafkaConsumer | AIOKafkaProducer | AIOKafkaAdminClient] = []
    for alive in gc.get_objects():
        if isinstance(alive, AIOKafkaConsumer | AIOKafkaAdminClient):
            client = alive._client
        elif isinstance(alive, AIOKafkaProducer):
            client = alive.client
        else:
            continue
        if alive._closed is False and client._client_id == client_id:
            found.append(alive)
    return found


class KafkaClientLeak(pytest.PytestWarning):
    """A Kafka client of this worker was collected unstopped (its making test may be an
    earlier one: see the module's docstring)."""


class _Collected(logging.Handler):
    """Keeps aiokafka's reports of clients collected unstopped, from the `asyncio` logger
    (ahead of pytest's capture, which keeps or drops records per test)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.reports: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(UNCLOSED):
            self.reports.append(message.replace("\n", " "))


_collected = _Collected()
logging.getLogger("asyncio").addHandler(_collected)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    yield
    if nextitem is None:
        # The worker's last test: what is still garbage is collected now, not at its exit.
        gc.collect()
    if _collected.reports:
        reports, _collected.reports[:] = list(_collected.reports), []
        # A warning, not a test's failure: collected in whichever test runs, a leak would
        # fail a test that did nothing wrong; the run fails instead (`Leaks`). Set
        # PYTHONASYNCIODEBUG=1 to have each report carry where the client was made
        # (aiokafka keeps that traceback in debug mode).
        warnings.warn(
            KafkaClientLeak(
                f"{len(reports)} Kafka client(s) collected unstopped by {item.nodeid}'s end"
                f" (made here or in an earlier test of this worker): {'; '.join(reports)}"
            ),
            stacklevel=1,
        )


class Leaks:
    """The KafkaClientLeak warnings of the whole run, in the run's own process (under xdist
    the controller, which each worker's warnings reach), and the run's failure if any: a
    warning nobody reads guards nothing, and failing the run blames no test."""

    def __init__(self) -> None:
        self.reports: list[str] = []

    def recorded(self, warning: warnings.WarningMessage, nodeid: str) -> None:
        if isinstance(warning.category, type) and issubclass(warning.category, KafkaClientLeak):
            self.reports.append(f"{nodeid}: {warning.message}")

    def exit_status(self, status: int) -> int:
        """The run's status: a run that passed fails when a client was left unstopped."""
        return pytest.ExitCode.TESTS_FAILED if self.reports and status == 0 else status

    def summary(self, terminal: pytest.TerminalReporter) -> None:
        if not self.reports:
            return
        terminal.section("Kafka clients left unstopped", sep="=", red=True)
        for report in self.reports:
            terminal.write_line(report)
        terminal.write_line(
            f"{len(self.reports)} report(s): the run fails (docs/testing.md, 'Kafka clients left"
            " unstopped'; PYTHONASYNCIODEBUG=1 tells where each client was made)"
        )


_leaks = Leaks()


def _in_a_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_warning_recorded(
    warning_message: warnings.WarningMessage, when: str, nodeid: str, location: object
) -> None:
    _leaks.recorded(warning_message, nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _in_a_worker(terminalreporter.config):
        _leaks.summary(terminalreporter)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _in_a_worker(session.config):
        session.exitstatus = _leaks.exit_status(session.exitstatus)
