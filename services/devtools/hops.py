"""Where a benchmark transaction's time goes, hop by hop, read back from the log.

Every record carries the time its producer created it (Kafka's CreateTime, one machine's
clock). Ordering one transaction's commands, observations and events by that time, the
gap between two consecutive records is the time one hop took: from a dispatch to the
observation of its provider call (the call, made by the decider once the dispatch committed,
and the decider's next transaction, which writes the observation with its decision), from a
webhook's observation to the decider's next event (fetch, decision, Kafka transaction). A hop
whose p99 is far above its p50 waits on a poll somewhere. Used by
`python -m services.devtools.bench --hops`.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections import defaultdict

from aiokafka import AIOKafkaConsumer, TopicPartition

from events.topics import Topics

Hop = tuple[str, str]


async def read_hops(
    bootstrap: str, topics: Topics, tx_prefix: str, client_id: str
) -> dict[Hop, list[float]]:
    """Gaps in ms between consecutive records of each transaction whose id starts with
    tx_prefix, by (record, next record), each named topic:type[:action]."""
    names = {topics.commands: "cmd", topics.observations: "obs", topics.events: "evt"}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    try:
        tps = [
            TopicPartition(topic, p)
            for topic in names
            for p in consumer.partitions_for_topic(topic) or await _partitions(consumer, topic)
        ]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            if not batch:
                break
            for tp, records in batch.items():
                for record in records:
                    value = json.loads(record.value or b"{}")
                    tx_id = value.get("tx_id", "")
                    if not tx_id.startswith(tx_prefix):
                        continue
                    what = value.get("type", "?")
                    action = value.get("action") or value.get("data", {}).get("action")
                    label = f"{names[tp.topic]}:{what}" + (f":{action}" if action else "")
                    seen[tx_id].append((record.timestamp, record.offset, label))
    finally:
        await consumer.stop()
    gaps: dict[Hop, list[float]] = defaultdict(list)
    for records in seen.values():
        records.sort()
        for (t0, _, a), (t1, _, b) in itertools.pairwise(records):
            gaps[(a, b)].append(float(t1 - t0))
    return gaps


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()  # the topic may not be cached yet
    return consumer.partitions_for_topic(topic) or set()


def hop_table(gaps: dict[Hop, list[float]], top: int = 14) -> str:
    lines = [
        f"{'hop (record -> next record of the transaction)':<72} {'n':>5} {'p50':>6} {'p99':>6}"
    ]
    ranked = sorted(gaps.items(), key=lambda kv: -sum(kv[1]))
    for (a, b), values in ranked[:top]:
        ordered = sorted(values)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        lines.append(
            f"{a + ' -> ' + b:<72} {len(values):5d} {statistics.median(ordered):6.0f} {p99:6.0f}"
        )
    return "\n".join(lines)
