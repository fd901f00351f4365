"""The benchmark's and `make run`'s options for an honest comparison (issue 24, item 6):
a warm-up before a measured run against a running stack, the sandbox's webhooks sent to a
sink instead of recon's intake, and a watcher that decodes only what ends a transaction."""

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from aiokafka import ConsumerRecord

from events.topics import Topics
from services.devtools import bench, stack


def test_warmup_defaults_to_none_with_url_and_twenty_with_its_own_stack() -> None:
    # A comparison reads CPU around the whole command: a warm-up it did not ask for would
    # be counted as measured.
    assert bench.parse_args(["--url", "http://127.0.0.1:8080"]).warmup == 0
    assert bench.parse_args([]).warmup == bench.WARMUP_OWN_STACK == 20


def test_warmup_is_taken_with_url_too() -> None:
    assert bench.parse_args(["--url", "http://127.0.0.1:8080", "--warmup", "300"]).warmup == 300
    assert bench.parse_args(["--warmup", "0"]).warmup == 0


def test_a_negative_warmup_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(["--warmup", "-1"])
    assert exit_.value.code == 2
    assert "--warmup must be 0 or more" in capsys.readouterr().err


def test_webhooks_to_is_for_its_own_stack(capsys: pytest.CaptureFixture[str]) -> None:
    sink = "http://127.0.0.1:8092/v1/webhooks/sandbox"
    assert bench.parse_args(["--webhooks-to", sink]).webhooks_to == sink
    with pytest.raises(SystemExit):
        bench.parse_args(["--url", "http://127.0.0.1:8080", "--webhooks-to", sink])
    # The stack behind --url chose where its webhooks go: the error says how.
    assert "services.devtools.stack --webhooks-to" in capsys.readouterr().err


@pytest.mark.parametrize("parse", [bench.parse_args, stack.parse_args])
@pytest.mark.parametrize("bad", ["127.0.0.1:8092", "ftp://x/y", "http://", "sink"])
def test_webhooks_to_must_be_an_http_url(
    parse: object, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(["--webhooks-to", bad])  # type: ignore[operator]
    assert exit_.value.code == 2
    assert "is not an http(s) URL" in capsys.readouterr().err


def test_the_sandbox_sends_its_webhooks_to_the_intake_unless_told_otherwise() -> None:
    default = stack.Stack("k:9092", "postgresql://unused", Path("logs"), intake_port=8180)
    assert default.webhook_target == "http://127.0.0.1:8180/v1/webhooks/sandbox"
    assert stack.parse_args([]).webhooks_to is None
    sink = "http://127.0.0.1:8092/v1/webhooks/sandbox"
    assert stack.parse_args(["--webhooks-to", sink]).webhooks_to == sink
    told = stack.Stack("k:9092", "postgresql://unused", Path("logs"), webhooks_to=sink)
    assert told.webhook_target == sink


def test_webhook_delay_is_passed_to_the_sandbox_and_is_for_its_own_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.parse_args([]).webhook_delay_ms == stack.parse_args([]).webhook_delay_ms == 0
    assert bench.parse_args(["--webhook-delay-ms", "2000"]).webhook_delay_ms == 2000
    assert stack.parse_args(["--webhook-delay-ms", "2000"]).webhook_delay_ms == 2000
    late = stack.Stack("k:9092", "postgresql://unused", Path("logs"), webhook_delay_ms=2000)
    assert late.webhook_delay_ms == 2000
    with pytest.raises(SystemExit):
        bench.parse_args(["--url", "http://127.0.0.1:8080", "--webhook-delay-ms", "2000"])
    assert "services.devtools.stack --webhook-delay-ms" in capsys.readouterr().err


@pytest.mark.parametrize("parse", [bench.parse_args, stack.parse_args])
@pytest.mark.parametrize("bad", ["-5", "2s", "1e3", "²", "600001"])
def test_webhook_delay_must_be_whole_milliseconds_within_ten_minutes(
    parse: object, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(["--webhook-delay-ms", bad])  # type: ignore[operator]
    assert exit_.value.code == 2
    assert "is not a whole number of milliseconds from 0 to 600000" in capsys.readouterr().err


def _record(
    envelope: Mapping[str, object], headers: tuple[tuple[str, bytes], ...] = ()
) -> ConsumerRecord[bytes, bytes]:
    value = json.dumps(envelope, separators=(",", ":")).encode()
    key = f"{envelope['tenant']}/{envelope['tx_id']}".encode()
    return ConsumerRecord(
        "recon.events", 0, 0, 0, 0, key, value, None, len(key), len(value), headers
    )


@pytest.mark.parametrize("kind", bench.ENDINGS)
def test_the_watcher_finds_every_ending(kind: str) -> None:
    record = _record({"tenant": "t", "tx_id": "bench-1", "type": kind, "seq": 9})
    assert bench.ending(record) == ("bench-1", kind)


def test_the_watcher_reads_an_ending_named_only_in_a_payload_as_no_ending() -> None:
    # The byte test lets it through; the decoded type says it ends nothing.
    note = {"note": "before TransactionCommitted"}
    record = _record({"tenant": "t", "tx_id": "b", "type": "EvidenceRecorded", "payload": note})
    assert bench.ending(record) is None


def test_a_type_header_that_names_no_ending_skips_the_record() -> None:
    committed = {"tenant": "t", "tx_id": "b", "type": "TransactionCommitted"}
    assert bench.ending(_record(committed, (("type", b"OperationDispatched"),))) is None
    assert bench.ending(_record(committed, (("type", b"TransactionCommitted"),))) == (
        "b",
        "TransactionCommitted",
    )


async def test_a_commit_resolves_its_transaction_and_a_failure_fails_it() -> None:
    watcher = bench.CommitWatcher("unused:9092", Topics())
    committed, failed = watcher.expect("bench-1"), watcher.expect("bench-2")
    watcher._take(_record({"tenant": "t", "tx_id": "bench-1", "type": "OperationConfirmed"}), 1.0)
    assert not committed.done()
    watcher._take(_record({"tenant": "t", "tx_id": "bench-1", "type": "TransactionCommitted"}), 2.0)
    watcher._take(_record({"tenant": "t", "tx_id": "bench-2", "type": "TransactionFailed"}), 3.0)
    assert committed.result() == 2.0
    with pytest.raises(RuntimeError, match="bench-2: TransactionFailed"):
        failed.result()
