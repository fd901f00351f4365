"""Where aiokafka's Python goes per decider Kafka transaction: the decider's transactions
(the records services.devtools.kafka_client_shape plans from the README transactions, --batch
inputs each, one partition's transactional producer built as the decider builds it, written
by services.decider.record_batches, spaced as the decider spaces them) against one broker, on
uvloop as the decider runs (services.event_loop, its aiokafka mend included), in this one
process: no consumer, no feeder, so the process's CPU is the producer's.

    python -m services.devtools.kafka_txn_micro -n 300 --rounds 6 --port-offset 200

Per round: CPU per transaction (`time.process_time`), and per transaction the requests by
kind with the CPU of encoding and writing each (`AIOKafkaConnection.send`) and of reading and
decoding its answer (`_handle_frame`), the sender routine's turns (one `drain_by_nodes` each)
and the tasks aiokafka creates. Those counters wrap aiokafka's methods for the measurement
only; --bare runs without them, for the CPU alone. docs/benchmark.md ("aiokafka's Python per
decider Kafka transaction") has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka import conn as aiokafka_conn
from aiokafka import util as aiokafka_util
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.producer import message_accumulator, sender

from services import event_loop
from services.config import load_settings
from services.decider.record_batches import Planned, send_planned
from services.decider.runtime import MAX_RECORD_BYTES
from services.decider.staged import Staged
from services.devtools.infra.kafka import KafkaBroker
from services.devtools.kafka_client_shape import Step, steps
from services.kafka_clients import acked_producer

REPO_ROOT = Path(__file__).resolve().parents[2]
ROLES = ("events", "state", "answers", "checkpoints")


@dataclasses.dataclass
class Counts:
    """What the wrapped aiokafka methods saw: per request kind, how many and their CPU."""

    sent: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    send_s: collections.defaultdict[str, float] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(float)
    )
    read_s: collections.defaultdict[str, float] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(float)
    )
    turns: int = 0
    tasks: int = 0

    def reset(self) -> None:
        for counter in (self.sent, self.send_s, self.read_s):
            counter.clear()
        self.turns = self.tasks = 0


COUNTS = Counts()


def _kind(request: Any) -> str:
    return re.sub(r"(_v\d+)?$", "", type(request).__name__, count=1).removesuffix("Request")


def count_aiokafka() -> None:
    """Wraps the methods counted (measurement only: the wrappers add their own CPU)."""
    conn = aiokafka_conn.AIOKafkaConnection
    send, frame = conn.send, conn._handle_frame
    drain = message_accumulator.MessageAccumulator.drain_by_nodes
    create_task = aiokafka_util.create_task
    clock = time.thread_time

    def counted_send(self: Any, request: Any, expect_response: bool = True) -> Any:
        start = clock()
        result = send(self, request, expect_response)
        COUNTS.send_s[_kind(request)] += clock() - start
        COUNTS.sent[_kind(request)] += 1
        return result

    def counted_frame(self: Any, resp: bytes) -> None:
        pending = self._requests[0][1] if self._requests else None
        start = clock()
        frame(self, resp)
        COUNTS.read_s[_kind(pending)] += clock() - start

    def counted_drain(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS.turns += 1
        return drain(self, *args, **kwargs)

    def counted_task(coro: Any, **kwargs: Any) -> Any:
        COUNTS.tasks += 1
        return create_task(coro, **kwargs)

    conn.send, conn._handle_frame = counted_send, counted_frame
    message_accumulator.MessageAccumulator.drain_by_nodes = counted_drain
    sender.create_task = counted_task


def transactions_of(prefix: str, inputs: int, batch: int) -> list[list[Planned]]:
    """The decider's transactions over the README inputs, `batch` inputs each, all on
    partition 0's producer (their own partitions as planned, as the decider writes them)."""
    all_steps = steps(inputs)
    chunks = [all_steps[i : i + batch] for i in range(0, len(all_steps), batch)]
    return [_planned(prefix, chunk) for chunk in chunks]


def _planned(prefix: str, chunk: list[Step]) -> list[Planned]:
    staged = Staged(0)
    for offset, step in enumerate(chunk):
        for out in step.outputs:
            topic = f"{prefix}{out.role}"
            if out.role == "state":
                assert out.key is not None
                staged.plan_state(topic, step.tx, out.key, out.value)
            else:
                staged.plan(topic, out.value, out.key, partition=0, headers=out.headers)
        staged.offsets[TopicPartition(f"{prefix}commands", 0)] = offset + 1
    staged.plan_offsets(f"{prefix}state")
    return staged.planned


async def decider_transaction(producer: AIOKafkaProducer, records: list[Planned]) -> None:
    """As services.decider.runtime's `_send` writes one."""
    async with producer.transaction():
        sent = await send_planned(producer, records)
        await sent.acknowledged()


async def rounds(
    bootstrap: str, args: argparse.Namespace, report: Callable[[str], None]
) -> list[float]:
    prefix = "m-"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}{role}", 4, 1) for role in ROLES])
    finally:
        await admin.close()
    settings = dataclasses.replace(load_settings(), kafka_bootstrap=bootstrap)
    producer = acked_producer(
        settings,
        "kafka-txn-micro",
        transactional_id=f"{prefix}decider-0",
        max_batch_size=MAX_RECORD_BYTES,
    )
    await producer.start()
    planned = transactions_of(prefix, args.transactions, args.batch)
    cpu_us = []
    try:
        for n in range(args.rounds + 1):  # the first warms the broker and this process
            COUNTS.reset()
            took = 0.0
            start = time.process_time()
            for records in planned:
                # Spaced as the decider spaces a partition's transactions (as long as the
                # last took): back to back, the coordinator refuses the next one's
                # AddPartitionsToTxn (CONCURRENT_TRANSACTIONS) and aiokafka backs off.
                await asyncio.sleep(took)
                began = time.perf_counter()
                await decider_transaction(producer, records)
                took = time.perf_counter() - began
            per_tx = (time.process_time() - start) * 1e6 / len(planned)
            if n:
                cpu_us.append(per_tx)
            report(_round_line(n, per_tx, len(planned), args.bare))
    finally:
        await producer.stop()
    return cpu_us


def _round_line(n: int, per_tx_us: float, transactions: int, bare: bool) -> str:
    line = f"round {n}{' (warm-up)' if not n else ''}: {per_tx_us:6.0f} us CPU per transaction"
    if bare:
        return line
    kinds = sorted(COUNTS.sent, key=lambda k: -(COUNTS.send_s[k] + COUNTS.read_s[k]))
    parts = [
        f"  {k:<20} {COUNTS.sent[k] / transactions:5.2f}/tx"
        f"  send {COUNTS.send_s[k] * 1e6 / COUNTS.sent[k]:5.0f} us"
        f"  answer {COUNTS.read_s[k] * 1e6 / COUNTS.sent[k]:5.0f} us"
        for k in kinds
    ]
    return "\n".join(
        [
            line
            + f"; sender turns {COUNTS.turns / transactions:.2f}/tx,"
            + f" sender tasks {COUNTS.tasks / transactions:.2f}/tx",
            *parts,
        ]
    )


async def main_async(bootstrap: str, args: argparse.Namespace) -> None:
    # Wrapped here, on the loop's side of services.event_loop.run: kafka_uvloop's install
    # before it assigns AIOKafkaConnection.send, and would replace a counter wrapped first
    # (the sends then uncounted, silently); wrapped after, the counter times the mended send.
    if not args.bare:
        count_aiokafka()
    cpu_us = await rounds(bootstrap, args, lambda line: print(line, flush=True))
    ordered = sorted(cpu_us)
    print(
        f"{args.batch} inputs per transaction: {', '.join(f'{x:.0f}' for x in cpu_us)} us"
        f" CPU per transaction (median {ordered[len(ordered) // 2]:.0f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--transactions", type=int, default=300, help="README ones")
    parser.add_argument("--batch", type=int, default=8, help="inputs per Kafka transaction")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--bare", action="store_true", help="without the counters")
    parser.add_argument("--port-offset", type=int, default=0)
    args = parser.parse_args()
    # A fresh broker each time: its data from an earlier run is not wanted.
    root = REPO_ROOT / ".cache" / f"kafka-txn-micro{args.port_offset or ''}"
    subprocess.run(["rm", "-rf", str(root)], check=True)
    kafka = KafkaBroker(root / "kafka", 29092 + args.port_offset, 29093 + args.port_offset)
    kafka.start()
    try:
        # As the decider runs it (services.event_loop): uvloop with aiokafka's write on a
        # reset connection mended (services.kafka_uvloop). Bare uvloop.run left it out, so a
        # broker reset here could end the producer's metadata task, the stall the mend is for.
        event_loop.run(main_async(kafka.bootstrap, args), "uvloop")
    finally:
        kafka.stop()


if __name__ == "__main__":
    main()
