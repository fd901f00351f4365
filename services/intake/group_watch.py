"""Whether each consumer group recon runs (services.consumer_groups.GROUPS) has a member and
a settled assignment, as its coordinator says (DescribeGroups), for `/healthz` and for the
metrics an alert pages on.

A group can stall with its processes alive and no error logged: a leader that never sends
its assignment (docs/operations.md, "A topic list changed during a periodic metadata
refresh") leaves the group in CompletingRebalance until the broker drops it at the session
timeout, and a lone member then stays out of it for up to 300 s; a member whose revocation
never returns holds the group in PreparingRebalance for up to its rebalance timeout. The
consumers' own metrics cannot say so (`recon_consumer_lag` is set after each fetch, and a
stalled consumer fetches nothing: its last value stays), so the intake asks the coordinator
from outside, every WATCH_INTERVAL_S and at every `/healthz`.

A group is settled when it is Stable with at least one member. One that is not counts as
unsettled from the first look that saw it so; a rebalance is normal (a deploy, a member
added) and lasts well under the session timeout, so `/healthz` fails only for a group
with no member at all (at once, as before) or one unsettled for STALLED_AFTER_S or more:
the time the broker allows a silent member, so a group still unsettled then is not waiting
for a dead member but stuck. The memory of when it became unsettled is this process's: an
intake started meanwhile counts from its own first look.

A settled group can still do nothing (a member heartbeating while its handler is stuck):
that rule is services.intake.group_progress's, followed by the same loop every
WATCH_INTERVAL_S (not at each `/healthz`, which judges with the last look's positions), and
the verdict names each stuck partition's owner from the group's assignment.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import GroupCoordinatorNotAvailableError, KafkaError

from services.closing import stop_each
from services.config import Settings
from services.consumer_groups import GROUPS
from services.intake.group_positions import OFFSETS_TOPIC, GroupPositions, Partitions
from services.intake.group_progress import STUCK_AFTER_S, GapReader, Progress, Waiting
from services.intake.health import HEALTH_TIMEOUT_S
from services.kafka_clients import SESSION_TIMEOUT_MS
from services.metrics import (
    CONSUMER_GROUP_MEMBERS,
    CONSUMER_GROUP_STATE,
    CONSUMER_GROUP_STUCK_SECONDS,
    CONSUMER_GROUP_UNSETTLED_SECONDS,
    CONSUMER_GROUP_WAITING_RECORDS,
    labelled,
)

log = logging.getLogger(__name__)

STALLED_AFTER_S = SESSION_TIMEOUT_MS / 1000
# Four DescribeGroups per look (their coordinators kept: services.intake.group_coordinators):
# a few ms of the intake's CPU every 2 s. Often enough that the unsettled time is right to
# 2 s against a 10 s threshold.
WATCH_INTERVAL_S = 2.0
# The topics' partitions are listed again after this (one Metadata request for every
# topic, the largest answer the watch reads, was asked at every look), or sooner: when a
# look fails (a topic deleted, Kafka away), when a group's assignment names a partition the
# listing lacks (partitions added to a topic its members read: their rebalance says so),
# and at every look until the broker has made `__consumer_offsets`. A partition nobody is
# assigned yet is watched this much later at worst; recon's topics keep their partition
# counts (co-partitioning, services.kafka_setup).
PARTITIONS_MAX_AGE_S = 30.0
# The states a coordinator reports for a classic consumer group (Kafka's GroupState);
# a state not listed here is shown too, and is never settled.
STATES = ("Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead")
NO_CONSUMER = "no consumer running"
# After the intake starts, a group failing is not logged for this long: at a stack's start
# the processes join while the intake already looks (a stack starts in 4-5 s,
# docs/testing.md), and a WARNING per group at every start, then `ok again`, taught
# nobody anything. `/healthz`, the gauges and so the alerts are not held back: only the log.
START_QUIET_S = 30.0
# The stuck partitions a verdict names (the longest waiting first); the rest are counted.
NAMED_PARTITIONS = 5


@dataclass(frozen=True)
class GroupSeen:
    state: str
    # Each member as `client_id@host`: which process to look at.
    members: tuple[str, ...]
    # Which member holds each partition, as the group's last assignment says.
    owners: dict[TopicPartition, str] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return self.state == "Stable" and bool(self.members)


def verdict(seen: GroupSeen, unsettled_s: float, waiting: list[Waiting]) -> str:
    """`ok`, or why the group fails `/healthz`: the one rule both the check and the
    watch's log apply (the alerts apply STALLED_AFTER_S and STUCK_AFTER_S to the gauges
    the watch sets)."""
    if not seen.members:
        return NO_CONSUMER
    if not seen.settled and unsettled_s >= STALLED_AFTER_S:
        return (
            f"stalled: {seen.state} for {unsettled_s:.0f} s, at least the session timeout"
            f" ({STALLED_AFTER_S:.0f} s), members {', '.join(seen.members)}"
        )
    stuck = [w for w in waiting if w.seconds >= STUCK_AFTER_S]
    if not stuck:
        return "ok"
    named = ", ".join(w.describe(seen.owners.get(w.tp)) for w in stuck[:NAMED_PARTITIONS])
    more = f" and {len(stuck) - NAMED_PARTITIONS} more" if len(stuck) > NAMED_PARTITIONS else ""
    return (
        f"not advancing: {len(stuck)} partition(s) with records to read and the group's"
        f" position unmoved for at least {STUCK_AFTER_S:.0f} s: {named}{more}"
    )


class GroupWatch:
    def __init__(
        self,
        admin: AIOKafkaAdminClient,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._admin, self._prefix, self._clock = admin, settings.group_prefix, clock
        # Each group's first look seen unsettled, while it stays so.
        self._unsettled_since: dict[str, float] = {}
        self._reported: set[str] = set()
        self._started_at = clock()
        self._positions = GroupPositions(settings, admin, "intake-watch")
        self._gaps = GapReader(settings)
        self.progress = Progress()
        # The topics' partitions as last listed (one Metadata request, for every topic),
        # and when: kept across follows (PARTITIONS_MAX_AGE_S).
        self._partitions: Partitions | None = None
        self._partitions_at = 0.0
        # When the positions were last read (the progress rule's now); None before.
        self._followed_at: float | None = None
        self._follow_failing = False

    async def close(self) -> None:
        await stop_each(self._positions.close, self._gaps.close)

    async def look(self) -> dict[str, str]:
        """Each group's verdict, by its name in GROUPS; its gauges set as seen now."""
        seen = await asyncio.gather(*(self._describe(name) for name in GROUPS))
        known = self._partitions.known if self._partitions is not None else {}
        if any(
            tp.partition not in known.get(tp.topic, ())
            for found in seen
            if isinstance(found, GroupSeen)
            for tp in found.owners
        ):
            # A group was assigned a partition the kept listing lacks (partitions added, a
            # topic created): listed afresh at the next follow.
            self._partitions = None
        return {
            name: found if isinstance(found, str) else self._judge(name, found)
            for name, found in zip(GROUPS, seen, strict=True)
        }

    async def follow(self) -> None:
        """Reads every group's positions and the gaps due a read (group_progress)."""
        now = self._clock()
        partitions = self._partitions
        if (
            partitions is None
            or now - self._partitions_at >= PARTITIONS_MAX_AGE_S
            or OFFSETS_TOPIC not in partitions.known
        ):
            partitions = await self._positions.partitions()
            self._partitions, self._partitions_at = partitions, now
        try:
            standings = await self._positions.standings(GROUPS, partitions)
        except BaseException:
            # A topic deleted, a partition moved, Kafka away: listed afresh at the next look.
            self._partitions = None
            raise
        now = self._clock()
        for name, found in standings.items():
            self.progress.seen(name, found, now)
        gaps = self.progress.to_read(now)
        for tp, gap in (await self._gaps.read(gaps)).items():
            self.progress.read(tp, gaps[tp].position, gap)
        self._followed_at = now

    async def run(self) -> None:
        """Follows the positions and looks every WATCH_INTERVAL_S until cancelled (the
        intake's lifespan)."""
        while True:
            try:
                async with asyncio.timeout(WATCH_INTERVAL_S + HEALTH_TIMEOUT_S):
                    await self.follow()
                if self._follow_failing:
                    self._follow_failing = False
                    log.info("the consumer groups' positions are read again")
            except (TimeoutError, KafkaError) as exc:
                # Kafka away (the `kafka` check says so): the progress rule judges with
                # the last positions read until it answers again.
                if not self._follow_failing:
                    self._follow_failing = True
                    log.warning("cannot read the consumer groups' positions (%r)", exc)
            except Exception:
                log.exception("the consumer group watch failed to read the positions")
            try:
                await self.look()
            except Exception:
                # Not expected (a refusal is a verdict): said, and the watch goes on, so
                # one odd answer does not freeze the gauges an alert reads.
                log.exception("the consumer group watch failed a look")
            await asyncio.sleep(WATCH_INTERVAL_S)

    def _judge(self, name: str, seen: GroupSeen) -> str:
        group = f"{self._prefix}{name}"
        now = self._clock()
        if seen.settled:
            self._unsettled_since.pop(group, None)
            unsettled_s = 0.0
        else:
            unsettled_s = now - self._unsettled_since.setdefault(group, now)
        waiting = (
            self.progress.waiting(name, self._followed_at) if self._followed_at is not None else []
        )
        labelled(CONSUMER_GROUP_MEMBERS, group).set(len(seen.members))
        labelled(CONSUMER_GROUP_UNSETTLED_SECONDS, group).set(unsettled_s)
        labelled(CONSUMER_GROUP_STUCK_SECONDS, group).set(
            max((w.seconds for w in waiting), default=0)
        )
        labelled(CONSUMER_GROUP_WAITING_RECORDS, group).set(sum(w.behind for w in waiting))
        for state in (*STATES, *((seen.state,) if seen.state not in STATES else ())):
            labelled(CONSUMER_GROUP_STATE, group, state).set(state == seen.state)
        found = verdict(seen, unsettled_s, waiting)
        # Logged once per episode, when it starts failing and when it ends: the log line
        # names the members, so the operator knows which process to read. A group failing
        # in the start's quiet spell is logged once the spell is over, if it still fails.
        quiet = now - self._started_at < START_QUIET_S
        if found != "ok" and group not in self._reported and not quiet:
            self._reported.add(group)
            log.warning("consumer group %s: %s", group, found)
        elif found == "ok" and group in self._reported:
            self._reported.discard(group)
            log.info("consumer group %s: ok again (%s)", group, seen.state)
        return found

    async def _describe(self, name: str) -> GroupSeen | str:
        """What the coordinator says, or why it could not be asked (not judged: the
        gauges keep their last values, and `/healthz` fails on this text)."""
        group = f"{self._prefix}{name}"
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                responses = await self._positions.coordinators.describe(group)
        except GroupCoordinatorNotAvailableError:
            # No coordinator yet: no group has been joined on this cluster.
            return GroupSeen("Dead", ())
        except (TimeoutError, KafkaError) as exc:
            return f"cannot describe the consumer group ({exc!r})"
        for response in responses:
            for described in response.to_object()["groups"]:
                if described["group"] != group:
                    continue
                if described["error_code"]:
                    # A coordinator still loading the group, or moving: asked again at
                    # the next look.
                    return (
                        f"cannot describe the consumer group (error code {described['error_code']})"
                    )
                members = {
                    f"{member['client_id']}@{member['client_host']}": member["member_assignment"]
                    for member in described["members"]
                }
                return GroupSeen(str(described["state"]), tuple(members), _owners(members))
        return GroupSeen("Dead", ())


def _owners(members: dict[str, bytes]) -> dict[TopicPartition, str]:
    """Each partition's member, from the assignments the group's leader sent (empty while
    a rebalance has not completed; an assignment that does not decode names nobody)."""
    found: dict[TopicPartition, str] = {}
    for member, assignment in members.items():
        if not assignment:
            continue
        try:
            decoded = ConsumerProtocolMemberAssignment.decode(assignment)
        except Exception:
            # Not the consumer protocol (another client's group of that name): the
            # verdict names no owner for its partitions, nothing else changes.
            log.warning("consumer group member %s: assignment not readable", member)
            continue
        for tp in decoded.partitions():
            found[tp] = member
    return found
