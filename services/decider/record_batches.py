"""How the decider writes one Kafka transaction's records: one batch per partition, built and
handed to the producer whole (aiokafka's `create_batch`/`send_batch`), instead of one `send`
per record.

The batches are the ones aiokafka's accumulator made of the same records (per partition, in
the order planned, a new batch when one reaches the producer's batch size), so the Produce
requests are the same; what goes is the per-record path around them: a coroutine, a size
estimate, a partition check, a future and, on the answer, a RecordMetadata per record, and a
future per record for the transaction to wait on. A record with no partition (a dead letter,
whose topic's partitioner picks one) still goes through `send`.
"""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata


@dataclass
class Planned:
    """A record of the transaction, as the decider planned it."""

    topic: str
    value: bytes
    key: bytes | None
    partition: int | None
    headers: list[tuple[str, bytes]] | None = None


@dataclass
class Sent:
    """The batches on their way, and where each planned record is in them."""

    batches: list["asyncio.Future[RecordMetadata]"]
    # Per planned record: its batch and its offset from the batch's first record.
    places: list[tuple[int, int]]

    async def acknowledged(self) -> None:
        """Waits for every batch: a batch the broker refuses fails it here, so that a refusal
        aborts the whole transaction (aiokafka may otherwise commit the rest)."""
        await asyncio.gather(*self.batches)

    def offset(self, index: int) -> int:
        """The offset of the planned record `index`, once acknowledged."""
        batch, relative = self.places[index]
        return int(self.batches[batch].result().offset) + relative


async def send_planned(producer: AIOKafkaProducer, planned: Sequence[Planned]) -> Sent:
    """Sends the planned records inside the open transaction, in order per partition."""
    # In the order their first records were planned: a batch (topic, partition, builder),
    # or a record with no partition.
    outgoing: list[tuple[str, int, Any] | Planned] = []
    filling: dict[tuple[str, int], int] = {}  # the batch each partition is filling
    places: list[tuple[int, int]] = []
    for p in planned:
        if p.partition is None:
            places.append((len(outgoing), 0))
            outgoing.append(p)
            continue
        index = filling.get((p.topic, p.partition), -1)
        added = None if index < 0 else _append(outgoing[index], p)
        if added is None:  # the partition's first record, or its batch is full
            index = filling[(p.topic, p.partition)] = len(outgoing)
            outgoing.append((p.topic, p.partition, producer.create_batch()))
            added = _append(outgoing[index], p)
            assert added is not None, "a batch's first record always fits"
        places.append((index, added.offset))
    batches = []
    for out in outgoing:
        if isinstance(out, tuple):
            topic, partition, batch = out
            batches.append(await producer.send_batch(batch, topic, partition=partition))
        else:
            batches.append(
                await producer.send(out.topic, value=out.value, key=out.key, headers=out.headers)
            )
    return Sent(batches, places)


def _append(out: "tuple[str, int, Any] | Planned", p: Planned) -> Any:
    assert isinstance(out, tuple)
    return out[2].append(key=p.key, value=p.value, timestamp=None, headers=p.headers or [])
