"""Counts a benchmark reads around its measured run: load-independent figures of cost.

- The decider's Kafka transactions and the inputs they committed, from its metrics
  (`recon_decider_kafka_transactions`, `recon_decider_inputs_committed`): T, decider
  transactions per recon transaction, is the count the group commit is measured by.
- The broker's requests by kind, from its request log (KafkaBroker(request_log=True)):
  every request of every client (the benchmark's own watcher fetches included) and the
  broker's own (transaction markers). CPU is not comparable in such a run: the log costs
  the broker per request.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# Kafka's API keys (the protocol's numbers) for the requests a recon run makes.
API_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    18: "ApiVersions",
    19: "CreateTopics",
    22: "InitProducerId",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    27: "WriteTxnMarkers",
    28: "TxnOffsetCommit",
    32: "DescribeConfigs",
    63: "BrokerHeartbeat",
}
_API_KEY = re.compile(rb'"requestApiKey":(\d+)')
# An AddPartitionsToTxn refused because the producer's previous transaction is still being
# completed: aiokafka retries it after its back-off (20 ms), on the transaction's path.
CONCURRENT_TRANSACTIONS = rb'rrorCode":51'
# A transactional Produce or TxnOffsetCommit the broker refused while verifying it with the
# transaction coordinator (Kafka 3.6+): one verification per transactional id at a time, a
# second refuses the first (NOT_ENOUGH_REPLICAS, COORDINATOR_NOT_AVAILABLE), and aiokafka
# retries it after its back-off (100 ms), on the transaction's path. A decider transaction
# that sends one Produce and no TxnOffsetCommit (its offsets on the changelog) meets none.
VERIFICATION_REFUSED = {0: rb'rrorCode":19', 28: rb'rrorCode":15'}


def metric_samples(metrics_urls: list[str]) -> Iterator[Sample]:
    """Every sample the processes at `metrics_urls` expose now."""
    for url in metrics_urls:
        text = httpx.get(url, timeout=10).text
        for family in text_string_to_metric_families(text):
            yield from family.samples


def decider_counts(metrics_urls: list[str]) -> Counter[str]:
    """Summed over the decider processes: transactions by what they carry, and inputs."""
    counts: Counter[str] = Counter()
    for sample in metric_samples(metrics_urls):
        if sample.name == "recon_decider_kafka_transactions_total":
            counts[f"transactions:{sample.labels['carries']}"] += int(sample.value)
        elif sample.name == "recon_decider_inputs_committed_total":
            counts["inputs"] += int(sample.value)
    return counts


def decider_table(before: Counter[str], after: Counter[str], transactions: int) -> str:
    done = after - before
    decisions = done["transactions:decisions"]
    checkpoints = done["transactions:checkpoints"]
    return (
        f"decider Kafka transactions: {decisions} with decisions + {checkpoints} checkpoints"
        f" alone = T {(decisions + checkpoints) / transactions:.2f} per transaction;"
        f" {done['inputs']} inputs, {done['inputs'] / max(decisions, 1):.2f} per decision"
        " transaction"
    )


def request_offset(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def request_counts(path: Path, since: int, until: int) -> Counter[str]:
    """Requests completed between two sizes of the broker's request log, by kind."""
    counts: Counter[str] = Counter()
    with path.open("rb") as log:
        log.seek(since)
        for line in log.read(until - since).splitlines():
            found = _API_KEY.search(line)
            if found:
                key = int(found.group(1))
                counts[API_NAMES.get(key, f"api {key}")] += 1
                if key == 24 and CONCURRENT_TRANSACTIONS in line:
                    counts["(of which CONCURRENT_TRANSACTIONS)"] += 1
                refused = VERIFICATION_REFUSED.get(key)
                if refused is not None and refused in line:
                    counts[f"(of which {API_NAMES[key]} refused, retried)"] += 1
    return counts


def request_table(counts: Counter[str], transactions: int) -> str:
    total = sum(n for name, n in counts.items() if not name.startswith("("))
    lines = [f"Kafka requests: {total} = {total / transactions:.1f} per transaction"]
    lines += [
        f"  {name:<20} {n:>8} {n / transactions:>7.2f}/tx" for name, n in counts.most_common()
    ]
    return "\n".join(lines)
