"""Kafka clients left unstopped: asked by a test while it holds them (`unstopped`), and
reported for the whole run at each test's teardown (registered in tests/conftest.py).

aiokafka says so of a client made and never stopped only when it is collected: a
ResourceWarning (ignored by default) and an ERROR on the `asyncio` logger (`Unclosed
AIOKafkaProducer`) through the loop's exception handler. Collection comes late, in whichever
test runs then or at the worker's exit, and pytest keeps the log of neither: the runs ended
with the last few printed by each worker as it exited, the rest never seen. So the plugin
watches the clients itself: each one made notes the test running and the project's frames
that made it, and one collected unstopped is reported with them (a CI run that failed on a
leak said only that there was one; docs/testing.md, "Kafka clients left unstopped")."""

from __future__ import annotations

import gc
import os
import sys
import warnings
from collections.abc import Generator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

_ROOT = f"{Path(__file__).resolve().parents[2]}/"
_MADE_AT = "_recon_made_at"


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


def made_at(frame: FrameType | None) -> str:
    """Where a client is being made: the test running (pytest's own note of it, with the
    phase) and the project's innermost frames from `frame` out, the making call first.
    Frames are walked, not formatted: thousands of clients are made in a run."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "no test")
    frames: list[str] = []
    while frame is not None and len(frames) < 4:
        path = frame.f_code.co_filename
        if path.startswith(_ROOT) and "/.venv/" not in path:
            frames.append(f"{path[len(_ROOT) :]}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return f"made in {test} at {' < '.join(frames) or 'no frame of the project'}"


class _Collected:
    """The clients collected unstopped since the last test's end, each with where it was
    made. Kept by the clients' own `__del__` (wrapped below), not read from the log."""

    def __init__(self) -> None:
        self.reports: list[str] = []

    def watch(self, cls: Any) -> None:
        made, collected = cls.__init__, cls.__del__

        def __init__(client: Any, *args: Any, **kwargs: Any) -> None:
            made(client, *args, **kwargs)
            setattr(client, _MADE_AT, made_at(sys._getframe(1)))

        def __del__(client: Any, _warnings: Any = warnings) -> None:
            if client._closed is False:  # False once made, True once stopped
                where = getattr(client, _MADE_AT, "made where not known")
                self.reports.append(f"{cls.__name__} {where}")
            collected(client, _warnings)

        cls.__init__, cls.__del__ = __init__, __del__


collected = _Collected()
collected.watch(AIOKafkaProducer)
collected.watch(AIOKafkaConsumer)


class KafkaClientLeak(pytest.PytestWarning):
    """A Kafka client of this worker was collected unstopped (its making test may be an
    earlier one: see the module's docstring)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    yield
    if nextitem is None:
        # The worker's last test: what is still garbage is collected now, not at its exit.
        gc.collect()
    if collected.reports:
        reports, collected.reports[:] = list(collected.reports), []
        # A warning, not a test's failure: collected in whichever test runs, a leak would
        # fail a test that did nothing wrong; the run fails instead (`Leaks`).
        warnings.warn(
            KafkaClientLeak(
                f"{len(reports)} Kafka client(s) collected unstopped by {item.nodeid}'s end:"
                f" {'; '.join(reports)}"
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
            " unstopped')"
        )


_leaks = Leaks()


def _in_a_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_warning_recorded(
    warning_message: warnings.WarningMessage, when: str, nodeid: str, location: object
) -> None:
    _leaks.recorded(warning_message, nodeid)


def pytest_unconfigure(config: pytest.Config) -> None:
    # After the run's last line, not in its summary: what CI keeps of a run is its tail.
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None and not _in_a_worker(config):
        _leaks.summary(terminal)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _in_a_worker(session.config):
        session.exitstatus = _leaks.exit_status(session.exitstatus)
