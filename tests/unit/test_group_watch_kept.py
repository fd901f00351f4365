"""What the group watch keeps between looks to spare requests, and when it lets it go.

It keeps each group's coordinator (services.intake.group_coordinators) until
an answer says it moved, and the answer is then the one the coordinator found afresh gives:
the cache saves FindCoordinator requests and never changes what is read. Against an admin
client that answers as a broker does: a coordinator that is not the group's any more says
NOT_COORDINATOR (per group in DescribeGroups, at the top of OffsetFetch's answer, which
then lists no partitions). It keeps the topics' partitions for PARTITIONS_MAX_AGE_S
(services.intake.group_watch), or until a group's assignment names one it lacks."""

from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from events.topics import Topics
from services.config import Settings
from services.consumer_groups import GROUPS
from services.intake.group_coordinators import Coordinators
from services.intake.group_positions import OFFSETS_TOPIC, Partitions
from services.intake.group_watch import GroupWatch

GROUP = "recon-saga"
TPS = [TopicPartition("recon.events", 0), TopicPartition("recon.events", 1)]
SETTINGS = Settings(
    kafka_bootstrap="127.0.0.1:9", database_url="", topics=Topics("t."), environment="test"
)
NOT_COORDINATOR = 16
LOADING = 14


@dataclass
class _Described:
    group: str
    error_code: int

    def to_object(self) -> dict[str, Any]:
        return {"groups": [{"group": self.group, "error_code": self.error_code}]}


@dataclass
class _Broker:
    """The admin client's view of a cluster whose group coordinator is `coordinator`."""

    coordinator: int = 1
    down: set[int] = field(default_factory=set)
    loading: bool = False
    asked: list[tuple[str, int | None]] = field(default_factory=list)

    async def find_coordinator(self, group: str) -> int:
        self.asked.append(("FindCoordinator", None))
        return self.coordinator

    def _reach(self, node: int) -> None:
        if node in self.down:
            raise KafkaConnectionError(f"node {node} not reached")

    async def list_consumer_group_offsets(
        self, group: str, group_coordinator_id: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        self.asked.append(("OffsetFetch", group_coordinator_id))
        self._reach(group_coordinator_id)
        if group_coordinator_id != self.coordinator or self.loading:
            return {}  # the top-level error the admin client does not read
        return {tp: OffsetAndMetadata(group_coordinator_id * 10, "") for tp in partitions}

    async def describe_consumer_groups(
        self, groups: list[str], group_coordinator_id: int
    ) -> list[_Described]:
        self.asked.append(("DescribeGroups", group_coordinator_id))
        self._reach(group_coordinator_id)
        moved = group_coordinator_id != self.coordinator
        code = NOT_COORDINATOR if moved else LOADING if self.loading else 0
        return [_Described(g, code) for g in groups]


async def test_a_kept_coordinator_is_asked_without_finding_it_again() -> None:
    broker = _Broker()
    coordinators = Coordinators(broker)
    await coordinators.offsets(GROUP, TPS)
    await coordinators.describe(GROUP)
    await coordinators.offsets(GROUP, TPS)
    assert broker.asked == [
        ("FindCoordinator", None),
        ("OffsetFetch", 1),
        ("DescribeGroups", 1),
        ("OffsetFetch", 1),
    ]


async def test_offsets_asked_of_a_coordinator_that_moved_are_read_from_the_new_one() -> None:
    broker = _Broker()
    coordinators = Coordinators(broker)
    await coordinators.offsets(GROUP, TPS)
    broker.coordinator = 2
    found = await coordinators.offsets(GROUP, TPS)
    # Not the empty answer (every partition read from its start): the new coordinator's.
    assert found == dict.fromkeys(TPS, OffsetAndMetadata(20, ""))
    broker.asked.clear()
    await coordinators.offsets(GROUP, TPS)
    assert broker.asked == [("OffsetFetch", 2)]  # kept again


async def test_a_description_from_a_coordinator_that_moved_is_asked_of_the_new_one() -> None:
    broker = _Broker()
    coordinators = Coordinators(broker)
    await coordinators.describe(GROUP)
    broker.coordinator = 2
    [answer] = await coordinators.describe(GROUP)
    assert answer.to_object()["groups"][0]["error_code"] == 0
    assert broker.asked[2:] == [
        ("DescribeGroups", 1),
        ("FindCoordinator", None),
        ("DescribeGroups", 2),
    ]


async def test_a_kept_coordinator_not_reached_is_found_again() -> None:
    broker = _Broker()
    coordinators = Coordinators(broker)
    await coordinators.describe(GROUP)
    broker.down, broker.coordinator = {1}, 2
    assert await coordinators.offsets(GROUP, TPS) == dict.fromkeys(TPS, OffsetAndMetadata(20, ""))
    [answer] = await coordinators.describe(GROUP)
    assert answer.to_object()["groups"][0]["error_code"] == 0


async def test_a_coordinator_still_loading_gives_no_positions_and_is_not_kept() -> None:
    broker = _Broker(loading=True)
    coordinators = Coordinators(broker)
    # Not {}: that read every partition as committed nowhere, from its start.
    with pytest.raises(KafkaError, match="answered no offsets"):
        await coordinators.offsets(GROUP, TPS)
    [answer] = await coordinators.describe(GROUP)
    assert answer.to_object()["groups"][0]["error_code"] == LOADING  # as answered
    broker.loading = False
    broker.asked.clear()
    await coordinators.offsets(GROUP, TPS)
    assert broker.asked == [("FindCoordinator", None), ("OffsetFetch", 1)]


@dataclass
class _Assigned:
    """A Stable group whose one member was assigned `partitions` of recon.events."""

    partitions: list[int]

    def to_object(self) -> dict[str, Any]:
        assignment = ConsumerProtocolMemberAssignment(
            0, [("t.recon.events", self.partitions)], b""
        ).encode()
        member = {"client_id": "saga", "client_host": "/10.0.0.7", "member_assignment": assignment}
        return {
            "groups": [
                {"group": group, "error_code": 0, "state": "Stable", "members": [member]}
                for group in (f"{SETTINGS.group_prefix}{name}" for name in GROUPS)
            ]
        }


class _AssigningBroker(_Broker):
    def __init__(self, partitions: list[int]) -> None:
        super().__init__()
        self.partitions = partitions

    async def describe_consumer_groups(  # type: ignore[override]
        self, groups: list[str], group_coordinator_id: int
    ) -> list[_Assigned]:
        return [_Assigned(self.partitions)]


async def test_an_assignment_naming_a_partition_the_listing_lacks_lists_them_again() -> None:
    """The watch keeps the topics' partitions for PARTITIONS_MAX_AGE_S; partitions added to
    a topic its groups read are listed at the next follow once a group is assigned one."""
    listed = Partitions({"t.recon.events": [0, 1], OFFSETS_TOPIC: [0]})
    broker = _AssigningBroker([0, 1])
    watch = GroupWatch(broker, SETTINGS)
    watch._partitions = listed
    await watch.look()
    assert watch._partitions is listed  # kept: every assigned partition is listed
    broker.partitions = [1, 2]  # one added, and assigned
    await watch.look()
    assert watch._partitions is None  # listed afresh at the next follow
