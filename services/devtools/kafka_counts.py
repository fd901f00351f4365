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
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime
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
# The broker's own AddPartitionsToTxn that verifies a transactional Produce with the
# transaction coordinator (transaction.partition.verification.enable, on by default): one
# per Produce that writes a partition for the first time in its transaction.
VERIFICATION = rb'"verifyOnly":true'
# Where a request's time went inside the broker, as its request log gives it (ms): waiting
# for a request handler thread, handled, waiting on another request or purgatory (a
# verification, acks=all, a fetch's long poll), waiting for a network thread, sent.
TIMES = ("totalTime", "requestQueueTime", "localTime", "remoteTime", "responseQueueTime")
_TIMES = re.compile(rb'"(' + b"|".join(t.encode() for t in TIMES) + rb')Ms":([0-9.]+)')


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
        elif sample.name in _MEANS:
            # Sums in microseconds: a Counter of ints subtracts run from run.
            scale = 1e6 if sample.name.endswith("_sum") else 1
            counts[_MEANS[sample.name]] += round(sample.value * scale)
    return counts


# Histograms whose means over the run the table gives: sample name -> count key.
_MEANS = {
    "recon_decider_input_wait_seconds_sum": "input_wait_us",
    "recon_decider_input_wait_seconds_count": "input_waits",
    "recon_decider_transaction_seconds_sum": "transaction_us",
    "recon_decider_transaction_seconds_count": "transactions_timed",
}


def decider_table(before: Counter[str], after: Counter[str], transactions: int) -> str:
    done = after - before
    decisions = done["transactions:decisions"]
    checkpoints = done["transactions:checkpoints"]
    return (
        f"decider Kafka transactions: {decisions} with decisions + {checkpoints} checkpoints"
        f" alone = T {(decisions + checkpoints) / transactions:.2f} per transaction;"
        f" {done['inputs']} inputs, {done['inputs'] / max(decisions, 1):.2f} per decision"
        " transaction\n"
        f"decider: an input waited {done['input_wait_us'] / max(done['input_waits'], 1) / 1000:.1f}"
        " ms on average from written to decided; a decision transaction took"
        f" {done['transaction_us'] / max(done['transactions_timed'], 1) / 1000:.1f} ms on average"
    )


def request_offset(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def logged_requests(path: Path, since: int, until: int) -> Iterator[tuple[int, bytes]]:
    """(API key, line) of each request completed between two sizes of the request log."""
    with path.open("rb") as log:
        log.seek(since)
        for line in log.read(until - since).splitlines():
            found = _API_KEY.search(line)
            if found:
                yield int(found.group(1)), line


def request_counts(path: Path, since: int, until: int, skip: bytes | None = None) -> Counter[str]:
    """Requests completed between two sizes of the broker's request log, by kind; without
    those whose line holds `skip` (a client's id: a benchmark's own load generator)."""
    counts: Counter[str] = Counter()
    for key, line in logged_requests(path, since, until):
        if skip is not None and skip in line:
            continue
        counts[API_NAMES.get(key, f"api {key}")] += 1
        if key == 24 and CONCURRENT_TRANSACTIONS in line:
            counts["(of which CONCURRENT_TRANSACTIONS)"] += 1
        if key == 24 and VERIFICATION in line:
            counts["(of which the broker's verifications)"] += 1
        refused = VERIFICATION_REFUSED.get(key)
        if refused is not None and refused in line:
            counts[f"(of which {API_NAMES[key]} refused, retried)"] += 1
    return counts


# The id its client sent with each request (services.kafka_clients.client_id for recon's).
_CLIENT_ID = re.compile(rb'"clientId":"([^"]*)"')


def requests_by_client(path: Path, since: int, until: int) -> Counter[tuple[str, str]]:
    """Requests completed between two sizes of the request log, by (client id, kind)."""
    counts: Counter[tuple[str, str]] = Counter()
    for key, line in logged_requests(path, since, until):
        client = _CLIENT_ID.search(line)
        name = client.group(1).decode() if client else "?"
        counts[name, API_NAMES.get(key, f"api {key}")] += 1
    return counts


BROKERS_OWN = "the broker's own"


def owner_of(client: str, owners: dict[str, str]) -> str:
    """Whose a client is: `owners` maps a client id prefix to its owner (recon's, the
    benchmark rig's); any other client is the broker's own (transaction markers,
    verifications, its controller's)."""
    return next((o for p, o in owners.items() if client.startswith(p)), BROKERS_OWN)


def requests_by_owner(counts: Counter[tuple[str, str]], owners: dict[str, str]) -> Counter[str]:
    """Requests by whose client sent them (owner_of), every owner of `owners` present."""
    by_owner: Counter[str] = Counter(dict.fromkeys([*owners.values(), BROKERS_OWN], 0))
    for (client, _kind), n in counts.items():
        by_owner[owner_of(client, owners)] += n
    return by_owner


def requests_headline(
    counts: Counter[tuple[str, str]], transactions: int, owners: dict[str, str], own: str
) -> str:
    """The two figures notes confused: requests per transaction of `own`'s clients (recon's:
    what recon costs the broker) and of all clients, the rig's and the broker's own too."""
    by_owner = requests_by_owner(counts, owners)
    others = ", ".join(
        f"{owner} {n / transactions:.2f}" for owner, n in by_owner.items() if owner != own
    )
    return (
        f"Kafka requests per transaction: {own} own clients {by_owner[own] / transactions:.2f};"
        f" all clients {by_owner.total() / transactions:.2f} ({others})"
    )


def client_table(
    counts: Counter[tuple[str, str]], transactions: int, owners: dict[str, str]
) -> str:
    """Requests per transaction by client and kind, the clients grouped by whose they are
    (owner_of)."""
    by_client: dict[str, Counter[str]] = defaultdict(Counter)
    for (client, kind), n in counts.items():
        by_client[client][kind] += n
    groups: dict[str, list[str]] = defaultdict(list)
    for client in sorted(by_client):
        groups[owner_of(client, owners)].append(client)
    lines = ["Kafka requests per transaction by client id and kind:"]
    for owner in [*owners.values(), BROKERS_OWN]:
        clients = groups.get(owner, [])
        total = sum(sum(by_client[c].values()) for c in clients)
        lines.append(f"  {owner}: {total / transactions:.2f}")
        for client in clients:
            kinds = by_client[client]
            lines.append(
                f"    {client:<32} {sum(kinds.values()) / transactions:5.2f}  "
                + ", ".join(f"{k} {n / transactions:.2f}" for k, n in kinds.most_common())
            )
    return "\n".join(lines)


def request_times(path: Path, since: int, until: int) -> dict[str, dict[str, float]]:
    """Mean ms of each of TIMES by request kind, between two sizes of the request log."""
    sums: dict[str, dict[str, float]] = {}
    for key, line in logged_requests(path, since, until):
        kind = sums.setdefault(API_NAMES.get(key, f"api {key}"), dict.fromkeys(("n", *TIMES), 0.0))
        kind["n"] += 1
        for field, value in _TIMES.findall(line):
            kind[field.decode()] += float(value)
    return {
        kind: {name: total[name] / total["n"] for name in TIMES} for kind, total in sums.items()
    }


# Each line of the request log starts with the time it was written, the request's end
# (services.devtools.infra.kafka); requests of a transaction name its transactional id.
_WRITTEN = re.compile(rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_TRANSACTIONAL_ID = re.compile(rb'ransactionalId":"([^"]+)"')
_TOTAL = re.compile(rb'"totalTimeMs":([0-9.]+)')


def transactions_in_broker(
    path: Path, since: int, until: int, prefix: str
) -> list[tuple[float, float]]:
    """(whole, in the broker) ms of each Kafka transaction of the producers whose
    transactional id starts with `prefix`, read back from their requests: from the arrival of
    its first AddPartitionsToTxn or Produce to its EndTxn's answer, and the sum of those
    requests' own times; the difference is spent in the producer and between the two."""
    begun: dict[bytes, list[tuple[float, float]]] = defaultdict(list)
    spans: list[tuple[float, float]] = []
    for key, line in logged_requests(path, since, until):
        if key not in (0, 24, 26) or VERIFICATION in line:
            continue
        written, tid, total = (
            _WRITTEN.match(line),
            _TRANSACTIONAL_ID.search(line),
            _TOTAL.search(line),
        )
        if not (written and tid and total) or not tid.group(1).decode().startswith(prefix):
            continue
        at = datetime.strptime(written.group(1).decode(), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        end, spent = at * 1000, float(total.group(1))
        requests = begun[tid.group(1)]
        requests.append((end - spent, spent))
        if key == 26:
            spans.append((end - min(start for start, _ in requests), sum(t for _, t in requests)))
            requests.clear()
    return spans


def transactions_table(spans: list[tuple[float, float]], who: str) -> str:
    if not spans:
        return f"{who} Kafka transactions in the request log: none"
    whole = sorted(w for w, _ in spans)

    def at(q: float) -> float:
        return whole[min(len(whole) - 1, int(q * len(whole)))]

    broker = statistics.median(b for _, b in spans)
    between = statistics.median(w - b for w, b in spans)
    return (
        f"{who} Kafka transactions in the request log: {len(spans)}, first request's arrival"
        f" -> EndTxn answered p50 {at(0.5):.1f} ms, p90 {at(0.9):.1f}, p99 {at(0.99):.1f};"
        f" p50 {broker:.1f} ms in the broker, {between:.1f} between its requests"
    )


def request_table(
    counts: Counter[str], transactions: int, times: dict[str, dict[str, float]] | None = None
) -> str:
    total = sum(n for name, n in counts.items() if not name.startswith("("))
    # All clients', the rig's and the broker's own included: recon's alone are
    # requests_headline's and client_table's.
    lines = [f"Kafka requests of all clients by kind: {total} = {total / transactions:.1f} per tx"]
    head = "" if not times else "  ms in the broker, mean: total = handler queue + handled"
    head += "" if not times else " + remote + network queue (+ send)"
    lines[0] += head

    def row(name: str, n: int) -> str:
        line = f"  {name:<20} {n:>8} {n / transactions:>7.2f}/tx"
        spent = (times or {}).get(name)
        if spent:
            line += "   " + " ".join(f"{spent[t]:6.2f}" for t in TIMES)
        return line

    lines += [row(name, n) for name, n in counts.most_common()]
    return "\n".join(lines)
