"""Each consumer group's coordinator, as FindCoordinator last answered, kept until an answer
says it moved: the group watch asks every group's coordinator twice every WATCH_INTERVAL_S
(DescribeGroups for its state, OffsetFetch for its positions: services.intake.group_watch,
services.intake.group_positions), and the admin client finds the coordinator afresh for
each ask unless told it, a FindCoordinator per ask, half the watch's requests.

A coordinator moves when its broker goes away or the `__consumer_offsets` partition holding
the group gets another leader; the old one then answers NOT_COORDINATOR (or is not reached
at all), and a broker restarting answers COORDINATOR_LOAD_IN_PROGRESS while it reads the
offsets back. So an ask of a kept coordinator that fails, or answers anything but a clean
answer for the group, forgets it and is asked once more of the coordinator found afresh: the
same two requests as before, one more at most, and the same answer. What tells a clean
answer: DescribeGroups carries an error code per group; OffsetFetch's (version 2 on) is at
the top of the answer, which the admin client does not read, and it then lists no
partitions. So the offsets are always asked for the group's partitions by name, which a
coordinator that knows the group answers one by one (offset -1 where it committed none):
an answer naming none of them is no answer.
"""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata


class Coordinators:
    def __init__(self, admin: Any) -> None:
        self._admin = admin
        self._known: dict[str, int] = {}

    async def offsets(
        self, group: str, tps: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets on `tps` (non-empty): offset -1 where it committed
        none; KafkaError when its coordinator, found afresh, answers none of them."""
        node = self._known.get(group)
        if node is not None:
            try:
                found = await self._offsets_of(group, tps, node)
            except KafkaError:
                found = {}
            if found:
                return found
            del self._known[group]
        node = await self._admin.find_coordinator(group)
        found = await self._offsets_of(group, tps, node)
        if not found:
            # Its error code unread (loading, moving): no positions, rather than every
            # partition read as committed nowhere (from its start), as before.
            raise KafkaError(f"{group}: its coordinator answered no offsets")
        self._known[group] = node
        return found

    async def describe(self, group: str) -> list[Any]:
        """The DescribeGroups answers for the group (the admin client's)."""
        node = self._known.get(group)
        if node is not None:
            try:
                answers = await self._describe_at(group, node)
            except KafkaError:
                answers = None
            if answers is not None and _clean(answers, group):
                return answers
            del self._known[group]
        node = await self._admin.find_coordinator(group)
        answers = await self._describe_at(group, node)
        if _clean(answers, group):
            self._known[group] = node
        return answers

    async def _offsets_of(
        self, group: str, tps: list[TopicPartition], node: int
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        ask = self._admin.list_consumer_group_offsets
        found: dict[TopicPartition, OffsetAndMetadata] = await ask(
            group, group_coordinator_id=node, partitions=tps
        )
        return found

    async def _describe_at(self, group: str, node: int) -> list[Any]:
        answers: list[Any] = await self._admin.describe_consumer_groups(
            [group], group_coordinator_id=node
        )
        return answers


def _clean(answers: list[Any], group: str) -> bool:
    """The group is described, with no error (NOT_COORDINATOR, loading, ...)."""
    return any(
        described["group"] == group and not described["error_code"]
        for answer in answers
        for described in answer.to_object()["groups"]
    )
