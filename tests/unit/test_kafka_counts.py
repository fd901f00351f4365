"""The broker's request log, counted by kind: the refusals that cost a transaction a retry
back-off are counted apart (services.devtools.kafka_counts)."""

from pathlib import Path

from services.devtools.kafka_counts import request_counts


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
