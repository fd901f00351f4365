"""A run whose tests all passed fails when a Kafka client was left unstopped
(tests/support/kafka_leaks.Leaks); other warnings and a run that failed anyway are left as
they are."""

import warnings

import pytest
from support.kafka_leaks import KafkaClientLeak, Leaks


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
