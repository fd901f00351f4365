"""One client's run of services.devtools.kafka_client_bench: the decider's Kafka
transactions through aiokafka or confluent-kafka, in a process of its own so that its CPU
time is that client's alone (librdkafka's threads included). Prints one JSON line.

The shape is the decider's (services.decider.runtime): read_committed reads of its two
input topics, and per partition and batch ONE transaction that writes each input's records
(services.devtools.kafka_client_shape) and one offset record per input partition consumed,
on the changelog (services.decider.input_offsets), never send_offsets_to_transaction. The
partitions' transactions run concurrently, each through its partition's transactional
producer (`--producers partition`, the decider's), or all through one producer in one
transaction per round (`--producers process`, what KIP-447 would allow). No decision is
made here: each input's records were decided beforehand, so the CPU is the client's.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
from collections import defaultdict
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from services.config import load_settings
from services.decider.record_batches import Planned, send_planned
from services.decider.runtime import MAX_RECORD_BYTES
from services.decider.staged import Staged
from services.devtools.cpu_account import _stat, jit_seconds
from services.devtools.kafka_client_shape import STEP_HEADER, Step, steps
from services.devtools.kafka_counts import request_counts, request_offset
from services.kafka_clients import acked_producer

# The client id of the benchmark's writer of inputs, whose requests are not the decider's.
FEEDER = "kafka-client-bench-feeder"

# (topic, partition, offset, step index) of a consumed input.
Input = tuple[str, int, int, int]


def topic_names(prefix: str) -> dict[str, str]:
    roles = ("commands", "observations", "events", "state", "answers", "checkpoints")
    return {role: f"{prefix}{role}" for role in roles}


def plan(inputs: list[Input], partition: int, all_steps: list[Step], prefix: str) -> list[Planned]:
    """The records of one partition's transaction over `inputs`, planned by the decider's own
    rules (services.decider.staged): one state record per transaction (the last decided),
    then the offset records."""
    names = topic_names(prefix)
    staged = Staged(partition)
    for topic, at, offset, index in inputs:
        step = all_steps[index]
        for out in step.outputs:
            if out.role == "state":
                assert out.key is not None
                staged.plan_state(names["state"], step.tx, out.key, out.value)
            else:
                staged.plan(
                    names[out.role], out.value, out.key, partition=partition, headers=out.headers
                )
        staged.offsets[TopicPartition(topic, at)] = offset + 1
    staged.plan_offsets(names["state"])
    return staged.planned


class AiokafkaClient:
    """aiokafka as the decider builds it and writes (transactional_producer, record_batches)."""

    def __init__(self, bootstrap: str) -> None:
        self.settings = dataclasses.replace(load_settings(), kafka_bootstrap=bootstrap)
        self.bootstrap = bootstrap
        self.producers: dict[int, Any] = {}
        self.consumer: AIOKafkaConsumer | None = None

    async def start(self, tps: list[tuple[str, int]], producer_ids: dict[int, str]) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await self.consumer.start()
        self.consumer.assign([TopicPartition(t, p) for t, p in tps])
        for slot, tid in producer_ids.items():
            producer = acked_producer(
                self.settings,
                "kafka-client-bench",
                transactional_id=tid,
                max_batch_size=MAX_RECORD_BYTES,
            )
            await producer.start()
            self.producers[slot] = producer

    async def fetch(self, limit: int) -> list[Input]:
        assert self.consumer is not None
        batch = await self.consumer.getmany(timeout_ms=500, max_records=limit)
        return [
            (tp.topic, tp.partition, r.offset, _step(r.headers))
            for tp, records in batch.items()
            for r in records
        ]

    async def transaction(self, slot: int, records: list[Planned]) -> None:
        producer = self.producers[slot]
        async with producer.transaction():
            # As the decider: one batch per partition, every one answered before the commit.
            sent = await send_planned(producer, records)
            await sent.acknowledged()
        _ = [sent.offset(i) for i in range(len(records))]  # finished markers' offsets

    async def stop(self) -> None:
        for producer in self.producers.values():
            await producer.stop()
        if self.consumer is not None:
            await self.consumer.stop()


class ConfluentClient:
    """confluent-kafka (librdkafka) in an asyncio process: produce() is a C call that only
    queues; every call that waits on the broker (init, commit, abort, consume) runs in a
    worker thread, and the delivery callbacks run in whichever thread serves them (the
    commit's flush), so they only store what the loop reads after the commit returns."""

    def __init__(self, bootstrap: str, linger_ms: float) -> None:
        self.bootstrap = bootstrap
        self.linger_ms = linger_ms
        self.producers: dict[int, Any] = {}
        self.consumer: Any = None

    async def start(self, tps: list[tuple[str, int]], producer_ids: dict[int, str]) -> None:
        import confluent_kafka

        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "kafka-client-bench",  # required by the client; nothing committed
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.assign(
            [confluent_kafka.TopicPartition(t, p, confluent_kafka.OFFSET_BEGINNING) for t, p in tps]
        )
        for slot, tid in producer_ids.items():
            producer = confluent_kafka.Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "transactional.id": tid,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": self.linger_ms,
                    "batch.size": MAX_RECORD_BYTES,
                }
            )
            await asyncio.to_thread(producer.init_transactions, 30)
            self.producers[slot] = producer

    async def fetch(self, limit: int) -> list[Input]:
        # consume(n, timeout) waits until it has n messages or the timeout passed, so it
        # would hold a lone input for the whole timeout: wait for one, then take what is there.
        first = await asyncio.to_thread(self.consumer.poll, 0.5)
        if first is None:
            return []
        messages = [first, *self.consumer.consume(limit - 1, 0)] if limit > 1 else [first]
        found = []
        for m in messages:
            if m.error() is None:
                found.append((m.topic(), m.partition(), m.offset(), _step(m.headers())))
        return found

    async def transaction(self, slot: int, records: list[Planned]) -> None:
        producer = self.producers[slot]
        offsets: list[int] = []
        failed: list[Any] = []

        def delivered(error: Any, message: Any) -> None:
            (failed if error is not None else offsets).append(error or message.offset())

        producer.begin_transaction()  # local: no request
        try:
            for r in records:
                producer.produce(
                    r.topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    headers=r.headers,
                    on_delivery=delivered,
                )
            # Flushes, serves the delivery callbacks, then EndTxn; raises if any send failed.
            await asyncio.to_thread(producer.commit_transaction, 30)
        except BaseException:
            await asyncio.to_thread(producer.abort_transaction, 30)
            raise
        if failed:
            raise RuntimeError(f"committed with failed deliveries: {failed}")

    async def stop(self) -> None:
        for producer in self.producers.values():
            await asyncio.to_thread(producer.flush, 10)
        if self.consumer is not None:
            await asyncio.to_thread(self.consumer.close)


def _step(headers: Any) -> int:
    for name, value in headers or ():
        if name == STEP_HEADER:
            return int(value)
    raise ValueError("input without its step header")


def _cpu(pid: int) -> float:
    found = _stat(pid) if pid else None
    return found[1] if found else 0.0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    all_steps = steps(args.transactions)
    names = topic_names(args.prefix)
    partitions = sorted({s.partition for s in all_steps} | set(range(args.partitions)))
    tps = [(names[role], p) for role in ("commands", "observations") for p in partitions]
    per_partition = args.producers == "partition"
    slots = partitions if per_partition else [0]
    ids = {slot: f"{args.prefix}decider-{slot}" for slot in slots}
    client: AiokafkaClient | ConfluentClient = (
        AiokafkaClient(args.bootstrap)
        if args.client == "aiokafka"
        else ConfluentClient(args.bootstrap, args.linger_ms)
    )
    await client.start(tps, ids)
    log = Path(args.request_log) if args.request_log else None
    walls: list[float] = []
    consumed = transactions = measured_inputs = 0
    began: dict[str, float] = {}

    async def timed(work: Awaitable[None]) -> None:
        start = time.perf_counter()
        await work
        if began:
            walls.append((time.perf_counter() - start) * 1000)

    def mark() -> dict[str, float]:
        return {
            "cpu": time.process_time(),
            "wall": time.perf_counter(),
            "broker": _cpu(args.broker_pid),
            "jit": jit_seconds(args.broker_pid) if args.broker_pid else 0.0,
            "log": float(request_offset(log)) if log else 0.0,
        }

    async def spaced(chunks: list[list[Input]], p: int) -> None:
        """Partition p's transactions one after another, not back to back: a busy decider
        spaces them by as long as the last took (services.decider.group_commit), which keeps
        the coordinator's CONCURRENT_TRANSACTIONS refusals rare."""
        took = 0.0
        for chunk in chunks:
            await asyncio.sleep(took)
            start = time.perf_counter()
            await timed(client.transaction(p, plan(chunk, p, all_steps, args.prefix)))
            took = time.perf_counter() - start

    total = len(all_steps)
    warmup_inputs = len(steps(args.warmup))
    while consumed < total:
        if not began and consumed >= warmup_inputs:
            began = mark()
        inputs = await client.fetch(args.batch * len(partitions))
        if not inputs:
            continue
        consumed += len(inputs)
        if began:
            measured_inputs += len(inputs)
        by_partition: dict[int, list[Input]] = defaultdict(list)
        for found in inputs:
            by_partition[found[1]].append(found)
        # At most --batch inputs per transaction, as a decider under load carries.
        chunks = {
            p: [mine[i : i + args.batch] for i in range(0, len(mine), args.batch)]
            for p, mine in by_partition.items()
        }
        if per_partition:
            chains = [spaced(chunk_list, p) for p, chunk_list in chunks.items()]
            transactions += sum(len(c) for c in chunks.values()) if began else 0
            await asyncio.gather(*chains)
        else:
            for j in range(max(len(c) for c in chunks.values())):
                records = [
                    r
                    for p, cs in chunks.items()
                    if j < len(cs)
                    for r in plan(cs[j], p, all_steps, args.prefix)
                ]
                await timed(client.transaction(0, records))
                transactions += 1 if began else 0
        if args.ack:
            print("committed", flush=True)  # the feeder's cue for the next input
    ended = mark()
    await client.stop()
    skip = f'"clientId":"{FEEDER}"'.encode()
    counts = request_counts(log, int(began["log"]), int(ended["log"]), skip) if log else {}
    walls.sort()
    confluent = f"confluent linger {args.linger_ms:g}"
    return {
        "client": args.client if args.client == "aiokafka" else confluent,
        "producers": args.producers,
        "transactions": transactions,
        "inputs": measured_inputs,
        "cpu_s": ended["cpu"] - began["cpu"],
        "wall_s": ended["wall"] - began["wall"],
        "broker_cpu_s": ended["broker"] - began["broker"],
        # Its JIT compilers: the broker's warm-up, not the requests' cost (docs/benchmark.md).
        "broker_jit_s": ended["jit"] - began["jit"],
        "p50_ms": walls[len(walls) // 2],
        "p99_ms": walls[min(len(walls) - 1, int(len(walls) * 0.99))],
        "requests": dict(counts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", choices=("aiokafka", "confluent"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--transactions", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=0, help="README transactions not measured")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--producers", choices=("partition", "process"), default="partition")
    parser.add_argument("--linger-ms", type=float, default=0.0)
    parser.add_argument("--ack", action="store_true", help="a line after each round")
    parser.add_argument("--request-log", default="")
    parser.add_argument("--broker-pid", type=int, default=0)
    print(json.dumps(asyncio.run(run(parser.parse_args()))), flush=True)


if __name__ == "__main__":
    main()
