"""A run whose tests all passed fails when a Kafka client was left unstopped
(tests/support/kafka_leaks.Leaks); other warnings and a run that failed anyway are left as
they are; a client collected unstopped is reported with where it was made."""

import gc
import warnings

import pytest
from support.kafka_leaks import KafkaClientLeak, Leaks, collected

from events.topics import Topics
from services.config import Settings
from services.kafka_clients import acked_producer


def _warning(category: type[Warning], text: str) -> warnings.WarningMessage:
    return warnings.WarningMessage(category(text), category, "kafka_leaks.py", 85)


def test_a_leak_fails_a_run_that_passed_and_names_where_it_was_collected() -> None:
    leaks = Leaks()
    leaks.recorded(_warning(DeprecationWarning, "not ours"), "tests/a.py::t")
    assert leaks.exit_status(pytest.ExitCode.OK) == pytest.ExitCode.OK
    leaks.recorded(_warning(KafkaClientLeak, "Unclosed AIOKafkaProducer"), "tests/b.py::t")
    assert leaks.exit_status(pytest.ExitCode.OK) == pytest.ExitCode.TESTS_FAILED
    assert leaks.reports == ["tests/b.py::t: Unclosed AIOKafkaProducer"]


def test_a_run_that_failed_or_was_interrupted_keeps_its_status() -> None:
    leaks = Leaks()
    leaks.recorded(_warning(KafkaClientLeak, "Unclosed AIOKafkaConsumer"), "tests/c.py::t")
    assert leaks.exit_status(pytest.ExitCode.TESTS_FAILED) == pytest.ExitCode.TESTS_FAILED
    assert leaks.exit_status(pytest.ExitCode.INTERRUPTED) == pytest.ExitCode.INTERRUPTED


async def test_a_client_collected_unstopped_is_reported_with_where_it_was_made() -> None:
    """What a CI run that fails on a leak prints: the test running when the client was made
    and the project's frames that made it (a run once said only that there was one)."""
    settings = Settings(
        kafka_bootstrap="127.0.0.1:1", database_url="", topics=Topics("leak"), environment="test"
    )
    acked_producer(settings, "dropped")  # made, never started nor stopped, dropped
    gc.collect()
    reports, collected.reports[:] = list(collected.reports), []  # not this test's leak
    assert len(reports) == 1, reports
    assert reports[0].startswith(
        "AIOKafkaProducer made in tests/unit/test_kafka_leaks_run.py::"
        "test_a_client_collected_unstopped_is_reported_with_where_it_was_made (call)"
        " at services/kafka_clients.py:"
    ), reports
    assert "< tests/unit/test_kafka_leaks_run.py:" in reports[0], reports
