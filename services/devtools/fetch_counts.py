"""Each consumer client's fetches, read back from the broker's request log
(KafkaBroker(request_log=True), services.devtools.kafka_counts): how many, how many came
back empty, and what a fetch that did not carried. Fetch work (docs/benchmark.md, fetch45)
had to count these by hand.

The log gives a fetch's answer per partition in bytes (`recordsSizeInBytes`), never in
records. What a fetch carried of a partition is read from the same client's next fetch of
it: Kafka consumers ask from the offset after the last one they took, so the step between
the two `fetchOffset`s is the offsets the first answer delivered. Those are records and
control records alike (a transaction's commit marker takes an offset: on a topic written in
transactions, one per transaction per partition), so "offsets" is what the table says. A
partition whose next fetch is outside the window, or asks from an earlier offset (a seek, a
rebalance's reset), counts in no mean.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.devtools.kafka_counts import logged_requests

FETCH = 1  # Kafka's API key of a Fetch request
_BODY = b"Completed request:"


@dataclass
class Fetches:
    """One client's fetches over a window of the request log."""

    fetches: int = 0
    # Fetches whose every partition came back with no bytes: the long poll ran out.
    empty: int = 0
    # Of the fetches that came back with bytes: partitions that did, and their bytes.
    partitions: int = 0
    bytes: int = 0
    # Offsets delivered, over the non-empty fetches whose every partition with bytes was
    # asked again later in the window (`counted` of them).
    offsets: int = 0
    counted: int = 0

    @property
    def carrying(self) -> int:
        return self.fetches - self.empty


@dataclass
class _Unread:
    """A non-empty fetch whose partitions with bytes wait for their next fetch."""

    tally: Fetches
    partitions: int
    offsets: int = 0
    spoiled: bool = False  # one was asked again from an earlier offset

    def asked_again(self, began: int, offset: int) -> None:
        self.spoiled = self.spoiled or offset < began
        self.offsets += offset - began
        self.partitions -= 1
        if self.partitions == 0 and not self.spoiled:
            self.tally.offsets += self.offsets
            self.tally.counted += 1


def fetches_by_client(path: Path, since: int, until: int) -> dict[str, Fetches]:
    """Each client's Fetch requests completed between two sizes of the request log."""
    clients: dict[str, Fetches] = defaultdict(Fetches)
    # Client, topic, partition -> the offset a non-empty fetch asked it from, and the fetch.
    waiting: dict[tuple[str, str, int], tuple[int, _Unread]] = {}
    for key, line in logged_requests(path, since, until):
        if key != FETCH:
            continue
        logged: dict[str, Any] = json.loads(line[line.index(_BODY) + len(_BODY) :])
        client = str(logged["requestHeader"].get("clientId", "?"))
        asked = {
            (str(topic["topic"]), int(p["partition"])): int(p["fetchOffset"])
            for topic in logged["request"].get("topics", [])
            for p in topic["partitions"]
        }
        for (topic, partition), offset in asked.items():
            earlier = waiting.pop((client, topic, partition), None)
            if earlier is not None:
                began, unread = earlier
                unread.asked_again(began, offset)
        carried = {
            (str(topic["topic"]), int(p["partitionIndex"])): int(p["recordsSizeInBytes"])
            for topic in logged["response"].get("responses", [])
            for p in topic["partitions"]
            if int(p.get("recordsSizeInBytes", 0)) > 0
        }
        tally = clients[client]
        tally.fetches += 1
        if not carried:
            tally.empty += 1
            continue
        tally.partitions += len(carried)
        tally.bytes += sum(carried.values())
        pending = _Unread(tally, len(carried))
        for topic, partition in carried:
            waiting[client, topic, partition] = (asked.get((topic, partition), 0), pending)
    return dict(clients)


def fetch_table(clients: dict[str, Fetches], transactions: int) -> str:
    """Per client: fetches per transaction, the share that came back empty, and per fetch
    that came back with records: offsets (records and transaction markers), partitions, KB."""
    lines = [
        "Kafka fetches by client id (request log): per tx, empty, and per non-empty fetch:"
        " offsets delivered (records and transaction markers), partitions with records, KB",
        f"  {'client':<32} {'fetch/tx':>8} {'empty':>6} {'offsets':>8} {'parts':>6} {'KB':>6}",
    ]
    for client, seen in sorted(clients.items()):
        carrying = max(seen.carrying, 1)
        offsets = f"{seen.offsets / seen.counted:.2f}" if seen.counted else "-"
        lines.append(
            f"  {client:<32} {seen.fetches / transactions:>8.2f}"
            f" {seen.empty / seen.fetches:>6.0%} {offsets:>8}"
            f" {seen.partitions / carrying:>6.2f} {seen.bytes / carrying / 1024:>6.1f}"
        )
    return "\n".join(lines)
