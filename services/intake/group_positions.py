"""Where each consumer group recon runs stands on each partition of its inputs
(services.consumer_groups.inputs): the offset it reads from next and the log's end. The one
reading of it, for the console's lag (services.intake.console.kafka_counts) and the group
watch's progress rule (services.intake.group_progress).

Read with one consumer of no group (it joins nothing, commits nothing; it only asks the
brokers for offsets, read_uncommitted: the end is the high watermark, records of a
transaction still open included, so a partition a wedged producer holds is behind), started
on the first reading and kept for the intake's life, and the intake's admin client for the
topics' partitions and the groups' committed offsets. Every group commits its position to
its coordinator: the at-least-once consumers (saga, intents) their next offsets, the decider
and the projector a lag marker that follows their own position (kept on the changelog and in
Postgres) by about a second (services.decider.lag_marker, services.projector.runtime).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from services.config import Settings
from services.consumer_groups import inputs
from services.intake.group_coordinators import Coordinators
from services.kafka_clients import connection
from services.kafka_kept import KeptConsumer

# Where Kafka keeps the groups' committed offsets; the broker makes it at the first
# FindCoordinator, and answers no group's coordinator until its partitions have leaders.
OFFSETS_TOPIC = "__consumer_offsets"
# A request the offsets reader sends is given up after this (the callers bound their whole
# reading too): a broker that does not answer shows as unknown, never a page that hangs.
REQUEST_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Partitions:
    known: dict[str, list[int]]  # each topic's partitions, as one Metadata answer listed them

    def of(self, topics: list[str]) -> list[TopicPartition]:
        """Those of `topics` that exist (an intents topic not created yet has none)."""
        return [TopicPartition(t, p) for t in topics for p in self.known.get(t, ())]


@dataclass(frozen=True)
class Standing:
    """A group on one partition: the offset it reads from next, and the log's end."""

    position: int
    end: int

    @property
    def behind(self) -> int:
        return max(0, self.end - self.position)


class GroupPositions:
    def __init__(self, settings: Settings, admin: Any, client_role: str) -> None:
        self._settings, self._admin, self._role = settings, admin, client_role
        # Kept across readings: the group watch asks it for DescribeGroups too.
        self.coordinators = Coordinators(admin)
        self._reader = KeptConsumer(self._make_reader, "group watch's offsets reader")

    async def close(self) -> None:
        await self._reader.close()

    async def partitions(self) -> Partitions:
        """Every topic's partitions, from one Metadata request. Asked of the admin client:
        the offsets reader subscribes to nothing, so its own metadata knows no topic (its
        `topics()` fetches a copy it does not keep, and `partitions_for_topic` stayed None:
        every count, the dead letters' too, read 0). Every topic, not the ones named: a
        Metadata request naming a missing topic lets a broker with auto-creation on create
        it, with its own defaults."""
        described = await self._admin.describe_topics()
        return Partitions(
            {
                topic["topic"]: sorted(p["partition"] for p in topic["partitions"])
                for topic in described
                if not topic["error_code"]
            }
        )

    async def records(self, tps: list[TopicPartition]) -> int:
        """The records `tps` hold now (their end less their start)."""
        if not tps:
            return 0
        reader = await self._reader.get()
        ends = await reader.end_offsets(tps)
        starts = await reader.beginning_offsets(tps)
        return sum(ends[tp] - starts[tp] for tp in tps)

    async def standings(
        self, names: tuple[str, ...], partitions: Partitions
    ) -> dict[str, dict[TopicPartition, Standing]]:
        """Each group of `names` on each partition of its inputs. One ListOffsets for the
        ends and one for the starts of every group's inputs together (the projector and the
        saga share recon.events), and the committed offsets of each group with something in
        its inputs (services.intake.group_coordinators: asked of its coordinator as last
        found, for the partitions by name)."""
        by_group = {name: partitions.of(inputs(name, self._settings)) for name in names}
        every = sorted({tp for tps in by_group.values() for tp in tps})
        if not every:
            return {name: {} for name in names}
        reader = await self._reader.get()
        ends = await reader.end_offsets(every)
        starts = await reader.beginning_offsets(every)
        found: dict[str, dict[TopicPartition, Standing]] = {}
        for name, tps in by_group.items():
            committed: dict[TopicPartition, Any] = {}
            if OFFSETS_TOPIC in partitions.known and any(ends[tp] != starts[tp] for tp in tps):
                # Else nothing to read (whatever was committed, the group is at the end),
                # or no group has committed on this cluster yet: nothing to ask, and nobody
                # to ask until the broker has made the topic (GroupCoordinatorNotAvailable;
                # a fresh broker has none for its first seconds: the lag read unknown).
                group = f"{self._settings.group_prefix}{name}"
                committed = await self.coordinators.offsets(group, tps)
            found[name] = {
                tp: Standing(read_from(starts[tp], ends[tp], committed.get(tp)), ends[tp])
                for tp in tps
            }
        return found

    def _make_reader(self) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            **connection(self._settings.kafka_bootstrap, self._role),
            enable_auto_commit=False,
            request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
        )


def read_from(start: int, end: int, committed: Any) -> int:
    """Where the group reads a partition from: its committed offset, or the partition's start
    when it committed none or one the log no longer holds (the consumers reset to earliest;
    a group that has committed nothing is behind by all its inputs hold, not by 0). A
    partition that holds nothing is read from its end, whatever was committed."""
    if start == end:
        return end
    if committed is None or committed.offset < start:
        return start
    return int(committed.offset)
