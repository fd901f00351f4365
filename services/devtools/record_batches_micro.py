"""Micro-benchmark of the decider's write of one Kafka transaction's records: one `send` per
record and a wait on every record's future (as before services.decider.record_batches)
against one batch per partition (`send_planned`), in alternation, on a broker of its own.

`python -m services.devtools.record_batches_micro` starts a single-node broker in
.cache/record-batches-micro (ports 19392/19393), then writes `--transactions` transactions of
a c30 decider transaction's shape each way (23 records: 14 events, 5 states and 2 offset
records on one partition, 2 answers on another; ~600 bytes each) and prints milliseconds of
this process's CPU per transaction: the records' building and queueing, the Produce and its
answer, the futures. Kafka's own CPU is not in it.
"""

import argparse
import asyncio
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

from events.topics import Topics
from services.decider.record_batches import Planned, send_planned
from services.devtools.infra.kafka import KafkaBroker
from services.kafka_setup import ensure_topics


def transaction(topics: Topics) -> list[Planned]:
    value = b"v" * 600
    records = [Planned(topics.events, value, b"demo/tx", 0, [("type", b"E")]) for _ in range(14)]
    records += [Planned(topics.decider_state, value, b"demo/tx", 0) for _ in range(5)]
    records += [Planned(topics.observations, value, b"demo/tx", 1) for _ in range(2)]
    records += [Planned(topics.decider_state, b"12", b"offset/x", 0) for _ in range(2)]
    return records


async def per_record(producer: AIOKafkaProducer, planned: list[Planned]) -> None:
    sends = [
        await producer.send(
            p.topic, value=p.value, key=p.key, partition=p.partition, headers=p.headers
        )
        for p in planned
    ]
    await asyncio.gather(*sends)


async def batched(producer: AIOKafkaProducer, planned: list[Planned]) -> None:
    await (await send_planned(producer, planned)).acknowledged()


async def measure(bootstrap: str, transactions: int, rounds: int) -> None:
    topics = Topics("micro.")
    await ensure_topics(bootstrap, topics)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id="micro-record-batches",
        max_batch_size=512 * 1024,
        acks="all",
        enable_idempotence=True,
    )
    await producer.start()
    planned = transaction(topics)
    best = {"per record": float("inf"), "one batch per partition": float("inf")}
    try:
        for _ in range(rounds):
            for name, write in (("per record", per_record), ("one batch per partition", batched)):
                began = time.process_time()
                for _ in range(transactions):
                    async with producer.transaction():
                        await write(producer, planned)
                best[name] = min(best[name], (time.process_time() - began) / transactions * 1e3)
    finally:
        await producer.stop()
    for name, ms in best.items():
        print(f"{name}: {ms:.3f} ms of CPU per transaction of {len(planned)} records")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    broker = KafkaBroker(Path(".cache/record-batches-micro"), 19392, 19393)
    broker.start()
    try:
        asyncio.run(measure(broker.bootstrap, args.transactions, args.rounds))
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
