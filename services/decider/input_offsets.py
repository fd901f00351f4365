"""How far the decider has read its inputs: written on its changelog, not in the group.

Every decider Kafka transaction writes, for each input partition it consumed, one small
record on `recon.decider-state` (the changelog it already writes in that transaction),
keyed `offset:<topic>:<partition>` so that compaction keeps the latest. The position thus
commits with the events and states it was decided into, in the same transaction, and
needs none of `send_offsets_to_transaction`'s two extra requests (AddOffsetsToTxn,
TxnOffsetCommit) nor `__consumer_offsets` in the transaction (its append, its markers).
A decider that takes partition p reads the position back with the states, from the same
committed prefix of the same log (services.decider.restore).

The consumer group's committed offsets become a lag marker for `kafka-consumer-groups`,
the console and other lag tools (services.decider.lag_marker): committed after the
transaction, outside it, tagged LAG_MARKER_METADATA. It is never the position:
`start_offset` ignores it whenever the changelog has a record, and it only ever carries an
offset a committed transaction wrote on the changelog, so it is never ahead of it.

A key without "/" is never a transaction's (events.keys.partition_key always puts one
between tenant and transaction id), and a Kafka topic name cannot hold one, so these
records cannot be mistaken for a state, whatever a tenant is called.
"""

import json
from typing import TypeGuard

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

KEY_PREFIX = b"offset:"

# The metadata of the group commits that are only a lag marker. Anything else in the group
# (an earlier release's transactional commit, an operator's reset) reads as written by
# someone other than this decider's lag marker.
LAG_MARKER_METADATA = "recon-decider lag marker; position on recon.decider-state"


class MisplacedOffsets(Exception):
    """The group holds this decider's lag marker for an input partition whose changelog has
    no offset record: the changelog lost records the decider wrote."""


def offset_record(tp: TopicPartition, offset: int) -> tuple[bytes, bytes]:
    """The changelog record (key, value) saying: `tp` is decided up to `offset` (next)."""
    key = f"offset:{tp.topic}:{tp.partition}".encode()
    value = json.dumps(
        {"kind": "offset", "topic": tp.topic, "partition": tp.partition, "offset": offset},
        separators=(",", ":"),
    ).encode()
    return key, value


def is_offset_key(key: bytes | None) -> TypeGuard[bytes]:
    # The "/" test alone tells them apart; the prefix makes the key say what it holds.
    return key is not None and key.startswith(KEY_PREFIX) and b"/" not in key


def parse_offset_record(key: bytes, value: bytes, partition: int) -> tuple[TopicPartition, int]:
    """The input partition and offset an offset record holds; ValueError if it is not one
    written for the changelog partition it was read from."""
    data = json.loads(value)
    if not isinstance(data, dict) or data.get("kind") != "offset":
        raise ValueError("not an offset record")
    topic, at, offset = data.get("topic"), data.get("partition"), data.get("offset")
    if not isinstance(topic, str) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"malformed offset record {data!r}")
    # A decider partition p reads input partitions p only (the range assignor pairs them).
    if at != partition or offset_record(TopicPartition(topic, at), offset)[0] != key:
        raise ValueError(f"offset record {data!r} under key {key!r} on partition {partition}")
    return TopicPartition(topic, at), offset


def start_offset(changelog: int | None, group: OffsetAndMetadata | None) -> int | None:
    """Where a decider that takes an input partition reads from (None: the beginning),
    given the changelog's offset record and the group's committed offset.

    1. The changelog's record: the position committed with the states it restored.
    2. Unless the group holds a commit that is not the lag marker and is ahead of it: a
       decider of an earlier release (which committed offsets inside its transactions,
       with the states they wrote on this same changelog) ran on the partition later, in a
       rolling upgrade; or an operator moved the group forward to skip inputs.
    3. No record (a changelog written before offsets were kept on it, or an input partition
       never consumed since): the group's offset, which only such transactions wrote.
       The lag marker there would mean the changelog lost what this decider wrote on it.
    """
    marker = group is not None and group.metadata == LAG_MARKER_METADATA
    if changelog is not None:
        if group is not None and not marker and group.offset > changelog:
            return int(group.offset)
        return changelog
    if group is None:
        return None
    if marker:
        raise MisplacedOffsets(
            f"the group's offset {group.offset} is the decider's lag marker, but the "
            "changelog holds no offset record for the partition"
        )
    return int(group.offset)


async def group_offsets(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition]
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The group's committed offsets with their metadata, in one request (aiokafka's public
    `committed()` asks for one partition and drops the metadata start_offset reads)."""
    coordinator = consumer._coordinator
    found: dict[TopicPartition, OffsetAndMetadata] = await coordinator.fetch_committed_offsets(tps)
    return {tp: meta for tp, meta in found.items() if meta.offset >= 0}
