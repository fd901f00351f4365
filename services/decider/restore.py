"""Restoring the decider's state for one partition from the compacted changelog.

The changelog holds one record per transaction once compacted: the full state of a
live transaction, a small marker (transactions.finished) for a finished one. So a
restore parses as many full states as there are transactions in progress, not as many as
were ever written (DESIGN: restore time bounded as history grows); of a marker it keeps
only its key and offset (services.decider.finished_index), so memory does not grow with
history either.

It also holds how far the partition's inputs were decided: one offset record per input
partition (services.decider.input_offsets), written by the same transactions as the states,
so the position read back always matches the states read back.

A record that cannot be read is not skipped: forgetting a transaction would let a
duplicate of its SubmitTransaction run it again. The restore fails, naming the record.
"""

import json
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from pydantic import ValidationError

from events.keys import partition_key
from services.decider.input_offsets import is_offset_key, parse_offset_record
from services.kafka_clients import connection, stop_consumer
from transactions.finished import MARKER_PREFIX, FinishedTransaction, keep
from transactions.state import TransactionState

StateKey = tuple[str, str]
Stored = TransactionState | FinishedTransaction


class CorruptChangelog(Exception):
    """A changelog record the decider cannot read; the partition cannot be owned safely."""


@dataclass
class Restored:
    # Live transactions' full states.
    states: dict[StateKey, TransactionState] = field(default_factory=dict)
    # Finished transactions: Kafka key -> offset of the marker on the changelog.
    finished: dict[bytes, int] = field(default_factory=dict)
    # Finished transactions whose latest record is still a full state (written before
    # markers existed): the decider rewrites them as markers so compaction can shrink them.
    legacy: dict[StateKey, FinishedTransaction] = field(default_factory=dict)
    # Per input partition, the next offset to decide, as the last committed transaction
    # that consumed it wrote it; none for a changelog written before offsets were kept here.
    offsets: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def live(self) -> int:
        return len(self.states)

    def forget(self, key: StateKey, kafka_key: bytes) -> None:
        self.states.pop(key, None)
        self.finished.pop(kafka_key, None)
        self.legacy.pop(key, None)


def parse_stored(raw: bytes) -> tuple[Stored, bool]:
    """The stored state, and whether it is a finished transaction's full state."""
    data = json.loads(raw)
    if isinstance(data, dict) and data.get("kind") == "finished":
        return FinishedTransaction.model_validate(data), False
    kept = keep(TransactionState.model_validate(data))  # only a finished one's marker
    return kept, isinstance(kept, FinishedTransaction)


async def restore_partition(bootstrap: str, topic: str, partition: int) -> Restored:
    tp = TopicPartition(topic, partition)
    consumer = AIOKafkaConsumer(
        **connection(bootstrap, "decider-restore"),
        isolation_level="read_committed",  # a fenced writer's aborted state is invisible
        enable_auto_commit=False,
        group_id=None,
    )
    try:
        await consumer.start()  # in the try: a start that fails leaves a consumer to close
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        # Under read_committed this is the last stable offset: everything committed.
        end = (await consumer.end_offsets([tp]))[tp]
        restored = Restored()
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000, max_records=5000)
            for record in batch.get(tp, []):
                _restore_record(restored, record, f"{topic}:{partition}@{record.offset}")
        return restored
    finally:
        # On the one consumer stop, as every consumer of recon. aiokafka's own already ends
        # at once here, the broker frozen included: no group to leave, and the fetch on its
        # way is cancelled, not waited for (measured: 0.001 s). No offset to lose: a
        # restore commits none, it reads the changelog from its beginning every time.
        await stop_consumer(consumer)


def _restore_record(restored: Restored, record: ConsumerRecord[bytes, bytes], at: str) -> None:
    if is_offset_key(record.key):
        if record.value is None:
            raise CorruptChangelog(f"{at}: a tombstone for offset record {record.key!r}")
        try:
            tp, offset = parse_offset_record(record.key, record.value, record.partition)
        except ValueError as error:
            raise CorruptChangelog(f"{at} (key {record.key!r}) cannot be read: {error}") from error
        restored.offsets[tp] = offset
        return
    if record.value is None:
        # A tombstone (a retention horizon's removal): the key is gone.
        if record.key is not None:
            restored.forget(_state_key(record.key), record.key)
        return
    if record.value.startswith(MARKER_PREFIX) and record.key is not None:
        restored.forget(_state_key(record.key), record.key)
        restored.finished[record.key] = record.offset
        return
    try:
        stored, legacy = parse_stored(record.value)
    except (ValueError, ValidationError) as error:
        raise CorruptChangelog(f"{at} (key {record.key!r}) cannot be read: {error}") from error
    key = (stored.tenant, stored.tx_id)
    restored.forget(key, partition_key(*key))
    if isinstance(stored, TransactionState):
        restored.states[key] = stored
    elif legacy:
        restored.legacy[key] = stored
    else:  # a marker without a key: cannot be indexed by it, so not read back
        raise CorruptChangelog(f"{at}: a finished transaction's marker without a key")


def _state_key(kafka_key: bytes) -> StateKey:
    tenant, _, tx_id = kafka_key.decode().partition("/")
    return tenant, tx_id
