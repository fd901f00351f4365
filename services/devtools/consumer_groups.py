"""Who owns which partitions in a consumer group, as its coordinator says (DescribeGroups).

Several instances of a process scale out only if the group hands each of them a share of
the partitions; an instance that joined but owns nothing adds CPU and no throughput, and
two that own the same partition would each act on its records. The benchmark waits on
this before it measures extra instances, and the scale-out tests assert it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import CoordinatorLoadInProgressError, GroupCoordinatorNotAvailableError

Partition = tuple[str, int]  # topic, partition


@dataclass(frozen=True)
class GroupView:
    group: str
    state: str
    # One set per member: the partitions the group leader assigned it.
    members: tuple[frozenset[Partition], ...]

    def spread_over(self, count: int) -> bool:
        """Stable, with exactly `count` members, each owning some partitions and no
        partition owned twice."""
        owned = [p for member in self.members for p in member]
        return (
            self.state == "Stable"
            and len(self.members) == count
            and all(self.members)
            and len(owned) == len(set(owned))
        )


async def describe(admin: AIOKafkaAdminClient, group: str) -> GroupView:
    [response] = await admin.describe_consumer_groups([group])
    [described] = response.to_object()["groups"]
    members = tuple(
        frozenset(
            (topic, partition)
            for topic, partitions in ConsumerProtocolMemberAssignment.decode(
                member["member_assignment"]
            ).assignment
            for partition in partitions
        )
        if member["member_assignment"]
        else frozenset()
        for member in described["members"]
    )
    return GroupView(group, str(described["state"]), members)


async def wait_spread(
    bootstrap: str,
    groups: list[str],
    count: int,
    timeout: float = 60,
    client_id: str = "devtools-consumer-groups",
) -> list[GroupView]:
    """Until every group is spread over exactly `count` members (a rebalance completed);
    TimeoutError naming what was last seen otherwise. `client_id`: who asks, in the
    broker's request log."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        seen: object = "nothing yet"
        while True:
            try:
                views = [await describe(admin, group) for group in groups]
            except (GroupCoordinatorNotAvailableError, CoordinatorLoadInProgressError) as exc:
                # A group whose coordinator is still being elected or loaded (a broker
                # just started) is not spread yet: asked again, as a group mid-rebalance.
                seen = exc
            else:
                if all(view.spread_over(count) for view in views):
                    return views
                seen = views
            if time.monotonic() > deadline:
                raise TimeoutError(f"groups not spread over {count} members: {seen}")
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
