"""What one Kafka transaction stream per decider process would save, measured before it is built.

The decider commits each input partition's decisions in a transaction of that partition's own
producer (services/decider/runtime.py): a new owner fences the last one by its transactional
id. One producer per process, one transaction over all the partitions it holds, would need
another fence: KIP-447's (the consumer group's generation in every transaction's offset
commit, services.devtools.kip447) or one of recon's own. This writes the same records each
round, for each of --partitions partitions a decider transaction's worth (--events events of
1 KB, --states states of 2.3 KB, the input offset record), four ways:

- `per partition`: a producer per partition, one transaction each, all at once (today);
- `one, KIP-447`: one producer, one transaction over every partition, the inputs' offsets
  committed in it with `TxnOffsetCommit` v3 (the fenced design);
- `one, unfenced`: the same without the offset commit (the floor of one stream; a fence of
  recon's own in the log would cost more than nothing);
- `one partition`: every record on partition 0 (`RECON_KAFKA_PARTITIONS=1`, stop 52's
  stand-in for one stream).

Per round, the broker's CPU without its JIT compiler threads and this process's CPU (the
producers' Python, the decider's share), ms; the ways alternate, forward then backward, after
a warm-up of each. Before that it checks the fence itself: a member's transaction commits,
and once that member has left the group, its producer's next transaction is refused and
nothing of it is visible to a read_committed reader.

    uv run python -m services.devtools.txn_streams --rounds 300 --warmup 300 --reps 6
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from services.config import MAX_PARTITIONS
from services.decider.record_batches import Planned, send_planned
from services.decider.runtime import MAX_RECORD_BYTES
from services.devtools.cpu_account import jit_seconds, process_seconds
from services.devtools.infra.kafka import KafkaBroker
from services.devtools.kip447 import fenced_offset_commits
from services.devtools.ports import free_port

EVENT, STATE = b"e" * 1000, b"s" * 2300


@dataclass(frozen=True)
class Shape:
    """What each round writes, and the names it writes under (`prefix`: a shared broker)."""

    partitions: int
    events: int
    states: int
    prefix: str = ""

    def name(self, what: str) -> str:
        return f"{self.prefix}txn-streams-{what}"

    def records(self, partition: int, into: int, round_: int) -> list[Planned]:
        """One decider transaction's records of input partition `partition`, written to
        partition `into` (itself, or 0 for the one-partition way)."""
        events, state = self.name("events"), self.name("state")
        key = f"tx-{partition}-".encode()
        out = [Planned(events, EVENT, key + b"%d" % i, into, None) for i in range(self.events)]
        out += [Planned(state, STATE, key + b"%d" % i, into, None) for i in range(self.states)]
        offset_key = f"offset:in:{partition}".encode()
        out.append(Planned(state, b'{"offset":%d}' % round_, offset_key, into, None))
        return out

    def inputs(self, round_: int) -> dict[TopicPartition, OffsetAndMetadata]:
        """The inputs' offsets a fenced transaction commits in the group."""
        topic = self.name("in")
        return {
            TopicPartition(topic, p): OffsetAndMetadata(round_, "") for p in range(self.partitions)
        }


def _producer(bootstrap: str, transactional_id: str) -> AIOKafkaProducer:
    # As the decider builds its producers (services.kafka_clients.acked_producer, one batch per
    # partition per transaction).
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        enable_idempotence=True,
        acks="all",
        max_batch_size=MAX_RECORD_BYTES,
    )


def broker_seconds(pid: int) -> float:
    """CPU seconds so far of the JVM `pid`, its JIT compiler threads left out."""
    return process_seconds(pid) - jit_seconds(pid)


async def _member(bootstrap: str, shape: Shape) -> AIOKafkaConsumer:
    """A member of the group holding every input partition."""
    consumer = AIOKafkaConsumer(
        shape.name("in"),
        bootstrap_servers=bootstrap,
        group_id=shape.name("group"),
        enable_auto_commit=False,
    )
    await consumer.start()
    while len(consumer.assignment()) < shape.partitions:
        await consumer.getmany(timeout_ms=200)
    return consumer


@dataclass
class Membership:
    """The generation a transaction's offset commit sends: the member's, or `pinned` (a
    member that has left, as its zombie would send)."""

    member: AIOKafkaConsumer
    pinned: tuple[int, str] | None = None

    def __call__(self) -> tuple[int, str]:
        if self.pinned is not None:
            return self.pinned
        return self.member._coordinator.generation, self.member._coordinator.member_id


async def check_fence(bootstrap: str, shape: Shape, membership: Membership) -> tuple[bool, bool]:
    """(the member's transaction committed, its zombie's was refused and is not visible).
    The member leaves and another takes its place in `membership`; the producer then
    commits with the left member's generation, as a zombie would."""
    producer = _producer(bootstrap, shape.name("fence"))
    await producer.start()
    loop = asyncio.get_running_loop()
    # aiokafka leaves the refused commit's future to the garbage collector, which would
    # print its traceback: the refusal is what this checks, and `commit` reports it.
    loop.set_exception_handler(
        lambda loop, context: (
            None
            if isinstance(context.get("exception"), ProducerFenced)
            else loop.default_exception_handler(context)
        )
    )

    async def commit(value: bytes, round_: int) -> bool:
        try:
            async with producer.transaction():
                await producer.send_and_wait(shape.name("fence"), value)
                await producer.send_offsets_to_transaction(
                    shape.inputs(round_), shape.name("group")
                )
        except KafkaError:
            return False
        return True

    try:
        member_committed = await commit(b"member", 1)
        membership.pinned = membership()
        await membership.member.stop()  # it leaves the group: a new generation without it
        membership.member = await _member(bootstrap, shape)
        zombie_committed = await commit(b"zombie", 2)
    finally:
        membership.pinned = None
        await producer.stop()
    reader = AIOKafkaConsumer(
        shape.name("fence"),
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await reader.start()
    try:
        seen = await reader.getmany(timeout_ms=3000)
    finally:
        await reader.stop()
    values = [record.value for records in seen.values() for record in records]
    return member_committed, not zombie_committed and values == [b"member"]


Round = Callable[[int], Awaitable[None]]


async def _ways(bootstrap: str, shape: Shape) -> tuple[dict[str, Round], list[AIOKafkaProducer]]:
    """Each way's round, and the producers to stop."""
    n, group = shape.partitions, shape.name("group")
    own = [_producer(bootstrap, shape.name(f"partition-{p}")) for p in range(n)]
    one = _producer(bootstrap, shape.name("process"))
    for producer in [*own, one]:
        await producer.start()

    async def per_partition(r: int) -> None:
        async def partition(p: int) -> None:
            async with own[p].transaction():
                await (await send_planned(own[p], shape.records(p, p, r))).acknowledged()

        await asyncio.gather(*(partition(p) for p in range(n)))

    async def one_stream(r: int, *, fenced: bool, into: Callable[[int], int]) -> None:
        async with one.transaction():
            planned = [x for p in range(n) for x in shape.records(p, into(p), r)]
            sent = await send_planned(one, planned)
            if fenced:
                await one.send_offsets_to_transaction(shape.inputs(r), group)
            await sent.acknowledged()

    ways: dict[str, Round] = {
        "per partition": per_partition,
        "one, KIP-447": lambda r: one_stream(r, fenced=True, into=lambda p: p),
        "one, unfenced": lambda r: one_stream(r, fenced=False, into=lambda p: p),
        "one partition": lambda r: one_stream(r, fenced=False, into=lambda p: 0),
    }
    return ways, [*own, one]


Figures = dict[str, list[tuple[float, float]]]


async def measure(
    bootstrap: str, broker_pid: int | None, shape: Shape, rounds: int, warmup: int, reps: int
) -> tuple[tuple[bool, bool], Figures]:
    """The fence check's (committed, refused), and per way, per rep: (the broker's ms per
    round, NaN without its pid; this process's)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        single = {"min.insync.replicas": "1"}
        await admin.create_topics(
            [
                NewTopic(shape.name(t), shape.partitions, 1, topic_configs=single)
                for t in ("in", "events", "state")
            ]
            + [NewTopic(shape.name("fence"), 1, 1, topic_configs=single)]
        )
    finally:
        await admin.close()
    membership = Membership(await _member(bootstrap, shape))
    try:
        with fenced_offset_commits(membership):
            ways, producers = await _ways(bootstrap, shape)
            try:
                committed, refused = await check_fence(bootstrap, shape, membership)
                print(
                    f"fence: the member's transaction committed: {committed}; "
                    f"its zombie's refused and invisible: {refused}",
                    flush=True,
                )
                figures = await _alternate(ways, broker_pid, rounds, warmup, reps)
            finally:
                for producer in producers:
                    await producer.stop()
    finally:
        await membership.member.stop()
    return (committed, refused), figures


async def _alternate(
    ways: dict[str, Round], broker_pid: int | None, rounds: int, warmup: int, reps: int
) -> Figures:
    r = 0
    for way in ways.values():  # the broker's JIT and the client's caches warm
        for _ in range(warmup):
            r += 1
            await way(r)
    figures: Figures = {name: [] for name in ways}
    for rep in range(reps):
        order = list(ways.items())
        for name, way in order if rep % 2 == 0 else reversed(order):
            broker0 = broker_seconds(broker_pid) if broker_pid else 0.0
            own0 = time.process_time()
            for _ in range(rounds):
                r += 1
                await way(r)
            own = (time.process_time() - own0) / rounds * 1000
            broker = (
                (broker_seconds(broker_pid) - broker0) / rounds * 1000
                if broker_pid
                else float("nan")
            )
            figures[name].append((broker, own))
            print(
                f"{name:14} rep {rep}: broker {broker:.2f}, this process {own:.2f} ms per "
                f"round (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    return figures


def report(figures: Figures) -> None:
    print("\nmeans, ms per round:")
    base = None
    for name, rows in figures.items():
        broker = sum(b for b, _ in rows) / len(rows)
        own = sum(o for _, o in rows) / len(rows)
        base = broker + own if base is None else base
        print(
            f"  {name:14} broker {broker:5.2f}  this process {own:5.2f}  "
            f"sum {broker + own:5.2f} ({(broker + own) / base:.0%} of per partition)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--partitions", type=int, default=4, help="input partitions (default 4)")
    parser.add_argument("--events", type=int, default=6, help="events per partition per round")
    parser.add_argument("--states", type=int, default=4, help="states per partition per round")
    parser.add_argument("--rounds", type=int, default=300, help="rounds per way and rep")
    parser.add_argument("--warmup", type=int, default=300, help="warm-up rounds per way")
    parser.add_argument("--reps", type=int, default=6, help="measured reps per way")
    args = parser.parse_args()
    for name in ("partitions", "events", "states", "rounds", "reps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.partitions > MAX_PARTITIONS:
        parser.error(f"--partitions must be at most {MAX_PARTITIONS}, as RECON_KAFKA_PARTITIONS")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    shape = Shape(args.partitions, args.events, args.states)
    with tempfile.TemporaryDirectory(prefix="txn-streams-") as root:
        broker = KafkaBroker(Path(root) / "kafka", free_port(), free_port())
        broker.start()
        try:
            measured = measure(
                broker.bootstrap, broker.pid, shape, args.rounds, args.warmup, args.reps
            )
            (committed, refused), figures = asyncio.run(measured)
            report(figures)
        finally:
            broker.stop()
    if not (committed and refused):
        # The KIP-447 way's figures are then of a transaction that fences nothing.
        raise SystemExit("the group fence did not hold: see the fence line above")


if __name__ == "__main__":
    main()
