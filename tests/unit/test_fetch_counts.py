"""Fetches per client read back from the broker's request log (services.devtools.fetch_counts),
on an excerpt recorded from `bench -n 100 -c 10 --warmup 50 --idle 0 --port-offset 400
--requests` (Kafka 3.9.1, Fetch v11): 50 lines, the end of the run and the idle fetches after
it, every client's requests interleaved as the broker wrote them."""

import json
from pathlib import Path

from services.devtools.fetch_counts import fetch_table, fetches_by_client

RECORDED = Path(__file__).parent / "recorded" / "kafka_requests.log"


def test_a_clients_fetches_empty_ones_and_what_the_others_carried_are_read_back() -> None:
    clients = fetches_by_client(RECORDED, 0, RECORDED.stat().st_size)
    decider = clients["recon-decider-inputs"]
    # Its five fetches (lines 8, 10, 16, 30, 42): the last came back with no bytes. The
    # others carried recon.observations p0 (882 B), p3 and p0 (4648 + 3119 B), p3 (882 B),
    # p3 (1625 B), and the next fetch of each partition asked from 2, 3 + 2, 2 and 3
    # offsets further on (a record and its transaction's commit marker take two).
    assert (decider.fetches, decider.empty, decider.carrying) == (5, 1, 4)
    assert (decider.partitions, decider.bytes) == (5, 882 + 4648 + 3119 + 882 + 1625)
    assert (decider.offsets, decider.counted) == (2 + 5 + 2 + 3, 4)
    # The intents reader only polled: both its fetches ran out their wait empty.
    intents = clients["recon-intents-inputs"]
    assert (intents.fetches, intents.empty, intents.counted) == (2, 2, 0)

    row = next(r for r in fetch_table(clients, 2).splitlines() if "recon-decider-inputs" in r)
    assert row.split()[1:] == ["2.50", "20%", "3.00", "1.25", f"{11156 / 4 / 1024:.1f}"]


def _fetch(client: str, offsets: dict[int, int], carried: dict[int, int]) -> str:
    """A Fetch line as Kafka logs it, of topic `t`: partition -> offset asked, -> bytes."""
    logged = {
        "requestHeader": {"requestApiKey": 1, "clientId": client},
        "request": {
            "topics": [
                {
                    "topic": "t",
                    "partitions": [{"partition": p, "fetchOffset": o} for p, o in offsets.items()],
                }
            ]
        },
        "response": {
            "responses": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partitionIndex": p, "recordsSizeInBytes": carried.get(p, 0)}
                        for p in offsets
                    ],
                }
            ]
        },
    }
    return (
        f"2026-12-05 21:00:00,000 Completed request:{json.dumps(logged, separators=(',', ':'))}\n"
    )


def test_a_fetch_asked_again_from_an_earlier_offset_or_never_counts_in_no_mean(
    tmp_path: Path,
) -> None:
    log = tmp_path / "requests.log"
    log.write_text(
        _fetch("c", {0: 10, 1: 5}, {0: 100, 1: 100})
        # Another client's fetch of the same partitions is not this client's next one.
        + _fetch("other", {0: 0, 1: 0}, {})
        + _fetch("c", {0: 14, 1: 2}, {0: 100})  # p1 from an earlier offset: a seek back
        + _fetch("c", {0: 20, 1: 2}, {})  # p0: 6 offsets; then empty
        + _fetch("c", {0: 20, 1: 2}, {1: 50})  # never asked again in the window
    )
    c = fetches_by_client(log, 0, log.stat().st_size)["c"]
    assert (c.fetches, c.empty, c.partitions, c.bytes) == (4, 1, 4, 350)
    assert (c.offsets, c.counted) == (6, 1)
