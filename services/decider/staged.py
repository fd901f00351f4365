"""One decider Kafka transaction in the making (services.decider.runtime): the records its
decisions plan, by the rules of what a transaction writes on the changelog, which the
Kafka client benchmark (services.devtools.kafka_client_run) plans by too."""

import time
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer, TopicPartition

from events.checkpoint import Head
from services.decider.input_offsets import offset_record
from services.decider.record_batches import Planned, Sent, send_planned
from services.decider.restore import StateKey, Stored
from services.dispatcher.dispatch_order import DispatchOrder


@dataclass
class Staged:
    """One Kafka transaction in the making: the decisions it carries, planned as records
    and sent when it opens, so that decisions that only record evidence can wait for the
    partition's next transaction (services.decider.group_commit)."""

    partition: int
    # Only the transactions these decisions changed, over the owned states: memory follows
    # the log once the transaction commits, without copying the partition's state.
    changes: dict[StateKey, Stored] = field(default_factory=dict)
    # Each changed transaction's Kafka key and latest changelog record (its index in
    # `planned`): a marker's offset comes from it.
    changelog: dict[StateKey, tuple[bytes, int]] = field(default_factory=dict)
    planned: list[Planned] = field(default_factory=list)
    # The last head each changed transaction's chain reached, and whether one ended.
    heads: dict[StateKey, Head] = field(default_factory=dict)
    ended: bool = False
    # The next input to read per input partition: written on the changelog with the records.
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    inputs: int = 0
    # The dispatches it commits: their calls start once it has committed (dispatch_host).
    dispatches: list[DispatchOrder] = field(default_factory=list)
    # A decision that must not wait (anything but evidence), and when the first was staged.
    urgent: bool = False
    # Whether a staged decision changed a transaction that had not finished before it: if
    # none did, all of it is late evidence and waits the longest (group_commit.interval).
    live: bool = False
    since: float = field(default_factory=time.monotonic)

    def plan(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        *,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> int:
        self.planned.append(Planned(topic, value, key, partition, headers))
        return len(self.planned) - 1

    def plan_state(self, topic: str, key: StateKey, kafka_key: bytes, value: bytes) -> None:
        """A transaction's state on the changelog: one record per transaction and Kafka
        transaction, so a later decision in the same batch rewrites the record planned (no
        reader sees part of a Kafka transaction, and restore keeps the last anyway)."""
        planned = self.changelog.get(key)
        if planned is not None:
            self.planned[planned[1]].value = value
        else:
            self.changelog[key] = (
                kafka_key,
                self.plan(topic, value, kafka_key, partition=self.partition),
            )

    def plan_offsets(self, topic: str) -> None:
        """Last, as the transaction opens: the next input to read per input partition, as
        records on the changelog partition it writes anyway (services.decider.input_offsets)."""
        for tp, offset in self.offsets.items():
            offset_key, offset_value = offset_record(tp, offset)
            self.plan(topic, offset_value, offset_key, partition=self.partition)

    async def write(self, producer: AIOKafkaProducer) -> Sent:
        """Sends every planned record inside the open transaction, one batch per partition
        (services.decider.record_batches)."""
        return await send_planned(producer, self.planned)
