"""The broker's request log, counted by kind: the refusals that cost a transaction a retry
back-off are counted apart (services.devtools.kafka_counts)."""

from pathlib import Path

from services.devtools.kafka_counts import (
    client_table,
    request_counts,
    request_table,
    request_times,
    requests_by_client,
    requests_headline,
    transactions_in_broker,
    transactions_table,
)
from services.kafka_clients import client_id, connection


def _line(key: int, error: int, field: str = "errorCode") -> str:
    return (
        f'Completed request:{{"requestHeader":{{"requestApiKey":{key}}},'
        f'"response":{{"responses":[{{"partitionResponses":[{{"{field}":{error}}}]}}]}}}}'
    )


def test_refusals_that_are_retried_later_are_counted_apart(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    lines = [
        _line(0, 0),
        _line(0, 19),  # a Produce refused while the broker verified its transaction
        _line(28, 15),  # a TxnOffsetCommit refused the same way
        _line(28, 0),
        _line(24, 51, "partitionErrorCode"),  # CONCURRENT_TRANSACTIONS
        _line(1, 0),
    ]
    log.write_text("".join(f"12:00:00,000 {line}\n" for line in lines))
    counts = request_counts(log, 0, log.stat().st_size)
    assert counts["Produce"] == 2
    assert counts["TxnOffsetCommit"] == 2
    assert counts["(of which Produce refused, retried)"] == 1
    assert counts["(of which TxnOffsetCommit refused, retried)"] == 1
    assert counts["(of which CONCURRENT_TRANSACTIONS)"] == 1
    assert counts["Fetch"] == 1


def test_a_skipped_clients_requests_are_not_counted(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    feeder = '{"requestHeader":{"requestApiKey":0,"clientId":"feeder"}}'
    decider = '{"requestHeader":{"requestApiKey":0,"clientId":"decider"}}'
    log.write_text(
        f"12:00:00,000 Completed request:{feeder}\n12:00:00,000 Completed request:{decider}\n"
    )
    assert request_counts(log, 0, log.stat().st_size)["Produce"] == 2
    assert request_counts(log, 0, log.stat().st_size, b'"clientId":"feeder"')["Produce"] == 1


def test_the_brokers_verifications_and_where_request_time_went_are_counted(tmp_path: Path) -> None:
    def timed(key: int, total: float, remote: float, verify: bool = False) -> str:
        request = '"request":{"transactions":[{"verifyOnly":true}]},' if verify else ""
        return (
            f'Completed request:{{"requestHeader":{{"requestApiKey":{key}}},{request}'
            f'"totalTimeMs":{total},"requestQueueTimeMs":0.5,"localTimeMs":1.0,'
            f'"remoteTimeMs":{remote},"responseQueueTimeMs":0.25,"sendTimeMs":0.1}}'
        )

    log = tmp_path / "requests.log"
    lines = [timed(0, 4.0, 2.0), timed(0, 2.0, 0.0), timed(24, 1.0, 0.0, verify=True)]
    lines.append(timed(24, 3.0, 0.0))
    log.write_text("".join(f"2026-12-03 12:00:00,000 {line}\n" for line in lines))
    size = log.stat().st_size
    counts = request_counts(log, 0, size)
    assert counts["AddPartitionsToTxn"] == 2
    assert counts["(of which the broker's verifications)"] == 1
    times = request_times(log, 0, size)
    assert times["Produce"]["totalTime"] == 3.0
    assert times["Produce"]["remoteTime"] == 1.0
    assert times["Produce"]["requestQueueTime"] == 0.5
    assert times["AddPartitionsToTxn"]["totalTime"] == 2.0
    row = next(line for line in request_table(counts, 2, times).splitlines() if "Produce" in line)
    assert row.split()[-5:] == ["3.00", "0.50", "1.00", "1.00", "0.25"]


def test_a_producers_transactions_are_read_back_from_its_requests(tmp_path: Path) -> None:
    def line(at: str, key: int, tid: str, total: float, verify: bool = False) -> str:
        field = "transactionalId" if key != 24 else "v3AndBelowTransactionalId"
        request = f'"{field}":"{tid}"' + (',"verifyOnly":true' if verify else "")
        return (
            f'2026-12-03 12:00:{at} Completed request:{{"requestHeader":{{"requestApiKey":{key}}},'
            f'"request":{{{request}}},"totalTimeMs":{total},"localTimeMs":0.1}}\n'
        )

    log = tmp_path / "requests.log"
    log.write_text(
        # decider-1: AddPartitionsToTxn arrives at 00.000, Produce 00.010-00.015, EndTxn
        # answered at 00.020 (2 ms): 20 ms in all, 2 + 5 + 2 = 9 in the broker.
        line("00,002", 24, "recon-decider-1", 2.0)
        + line("00,012", 24, "recon-decider-1", 1.0, verify=True)  # the broker's own
        + line("00,015", 0, "recon-decider-1", 5.0)
        + line("00,016", 0, "recon-dispatcher", 1.0)  # another producer's
        + line("00,020", 26, "recon-decider-1", 2.0)
        # decider-2, overlapping, then a second transaction of decider-1
        + line("00,014", 24, "recon-decider-2", 4.0)
        + line("00,030", 26, "recon-decider-2", 1.0)
        + line("00,041", 24, "recon-decider-1", 1.0)
        + line("00,050", 26, "recon-decider-1", 1.0)
    )
    spans = transactions_in_broker(log, 0, log.stat().st_size, "recon-decider")
    assert sorted(spans) == [(10.0, 2.0), (20.0, 5.0), (20.0, 9.0)]
    assert "3, first request's arrival -> EndTxn answered p50 20.0 ms" in transactions_table(
        spans, "decider"
    )


def test_requests_are_counted_by_client_and_grouped_by_whose_they_are(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"

    def request(key: int, client: str) -> str:
        header = f'{{"requestHeader":{{"requestApiKey":{key},"clientId":"{client}"}}}}'
        return f"12:00:00,000 Completed request:{header}\n"

    log.write_text(
        request(1, "recon-saga-inputs") * 3
        + request(8, "recon-saga-inputs")
        + request(1, "bench-watcher") * 2
        + request(27, "broker-1-txn-marker-sender")
    )
    counts = requests_by_client(log, 0, log.stat().st_size)
    assert counts == {
        ("recon-saga-inputs", "Fetch"): 3,
        ("recon-saga-inputs", "OffsetCommit"): 1,
        ("bench-watcher", "Fetch"): 2,
        ("broker-1-txn-marker-sender", "WriteTxnMarkers"): 1,
    }
    table = client_table(counts, 2, {"recon-": "recon's", "bench-": "the rig's"}).splitlines()
    assert table[1:] == [
        "  recon's: 2.00",
        "    recon-saga-inputs                 2.00  Fetch 1.50, OffsetCommit 0.50",
        "  the rig's: 1.00",
        "    bench-watcher                     1.00  Fetch 1.00",
        "  the broker's own: 0.50",
        "    broker-1-txn-marker-sender        0.50  WriteTxnMarkers 0.50",
    ]
    # The headline names whose requests its per-transaction figure counts: recon's own
    # clients' (2.00), not all clients' with the rig's and the broker's own (3.50).
    owners = {"recon-": "recon's", "bench-": "the rig's"}
    assert requests_headline(counts, 2, owners, "recon's") == (
        "Kafka requests per transaction: recon's own clients 2.00; all clients 3.50"
        " (the rig's 1.00, the broker's own 0.50)"
    )


def test_every_recon_client_tells_the_broker_its_process_and_role() -> None:
    assert client_id("decider-inputs") == "recon-decider-inputs"
    assert connection("127.0.0.1:9092", "saga-inputs")["client_id"] == "recon-saga-inputs"
