"""Whether each consumer group's work advances: the rule for a group that is Stable, its
members heartbeating, and yet does nothing (a handler stuck in a loop or on a call that
never returns, a poisoned record retried for ever, a partition a wedged producer holds with
an open transaction). Its coordinator says nothing of it (services.intake.group_watch: the
group is settled), so the intake reads each group's position on each partition of its inputs
against the log's end (services.intake.group_positions) every WATCH_INTERVAL_S and
remembers when each position last moved.

A partition is stuck when the group's position on it has not moved for STUCK_AFTER_S while
there was something for it to read there. "Behind the log's end" is not enough: a group's
committed offset is the offset after the last record it handled, so a transaction's commit
marker (recon.events is written in the decider's transactions), and aborted records, stay
between it and the end for good once the group has read everything. So a partition whose
position has not moved for READ_AFTER_S is read from that position (read_committed, as the
groups read) once: a record read means there is work the group has not done, unless it is
an answer the decider decided when it wrote it (services.inline_answers: the decider
moves its position past those only with the partition's next transaction, so an idle
decider stays behind the last of them; the live stack's first idle minute after a bench
reported "recon.observations[0] 3 behind" for every partition before this); an empty read
that reaches the end means nothing to do (remembered until the end moves: the clock then
starts again, from the look that saw records added, as it does for a position at the end,
never read); a read stopped below the end by the
last stable offset means a transaction still open holds the group (its producer wedged, or
just slow: read again at the next look). Only a stuck partition's owner is named, so the
operator knows which process to look at.

Why STUCK_AFTER_S is 60 s: a group that works moves its position at least every second or
two (the at-least-once consumers commit at most COMMIT_INTERVAL_S apart, the decider's and
the projector's lag markers at most a second apart plus a poll), and the longest a healthy
member holds one record is the decider's TRANSACTION_DEADLINE_S (30 s), after which it
gives the transaction up and reads again; a retry's back-off is at most 5 s. Twice the
longest pause is a wait nobody's work makes.

The memory is this process's: an intake started meanwhile counts from its own first look,
so a restarted intake reports a stuck group STUCK_AFTER_S (plus READ_AFTER_S) after its
start at the earliest, however long the group had been stuck before.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from services.config import Settings
from services.inline_answers import inline_answer
from services.intake.group_positions import REQUEST_TIMEOUT_S, Standing
from services.kafka_clients import connection
from services.kafka_kept import KeptConsumer

STUCK_AFTER_S = 60.0
# A position unmoved this long is read at: a group at work moves it more often (above), so
# a partition still is read once per quiet spell, not at every look.
READ_AFTER_S = 5.0
# One read of the gaps is given up after this; what it did not settle is read again at the
# next look (not judged: an unanswered read is no evidence of work waiting).
READ_TIMEOUT_S = REQUEST_TIMEOUT_S
# Enough to tell a record from none: the broker sends a whole first batch whatever this is.
READ_BYTES = 1024


class Gap(enum.Enum):
    """What a read from a group's position found before the log's end."""

    RECORD = "record"  # work the group has not done
    NOTHING = "nothing"  # only commit markers and aborted records
    OPEN = "open"  # a transaction still open: its records are not readable yet


@dataclass
class _Wait:
    """A group on one partition, since its position last moved."""

    position: int
    end: int
    # When the group's clock at this position started: the move, or the look that first
    # saw records added after a read found nothing to do.
    since: float
    # The last read's finding at this position and end (None: not read).
    gap: Gap | None = None


@dataclass(frozen=True)
class Waiting:
    """A partition with work for the group (or a transaction open) and its position
    unmoved for `seconds`."""

    tp: TopicPartition
    behind: int
    seconds: float
    open_transaction: bool

    def describe(self, owner: str | None) -> str:
        held = ", a transaction open" if self.open_transaction else ""
        return (
            f"{self.tp.topic}[{self.tp.partition}] {self.behind} behind for"
            f" {self.seconds:.0f} s{held} ({owner or 'no owner'})"
        )


class Progress:
    """The memory of each group's positions over the looks, and the rule. Pure: the watch
    gives it the clock, the standings and what the reads found."""

    def __init__(self) -> None:
        self._waits: dict[str, dict[TopicPartition, _Wait]] = {}

    def seen(self, group: str, standings: dict[TopicPartition, Standing], now: float) -> None:
        waits = self._waits.setdefault(group, {})
        for tp in [tp for tp in waits if tp not in standings]:
            del waits[tp]  # no longer an input (a tenant's intents rolled out)
        for tp, standing in standings.items():
            wait = waits.get(tp)
            if wait is None or wait.position != standing.position:
                waits[tp] = _Wait(standing.position, standing.end, now)
                continue
            if standing.end != wait.end:
                if wait.gap is Gap.NOTHING or wait.position == wait.end:
                    # It had nothing to do up to the old end (read so, or at the end: a
                    # topic without commit markers, recon.drift, is never read while its
                    # groups keep up): its work starts now. Kept from its last move, an
                    # idle partition's first new record was judged waiting since then: at
                    # the look that saw it, before its group had taken it, the intake
                    # warned "recon.drift[3] 1 behind for 60 s" (a 60 s freeze of the
                    # intake, tests/fault/test_drift_claim_frozen_intake.py, was the idle
                    # minute there; any quiet minute was enough).
                    wait.since = now
                if wait.gap is not Gap.RECORD:
                    wait.gap = None  # a record stays there however far the end moves
                wait.end = standing.end

    def to_read(self, now: float) -> dict[TopicPartition, Standing]:
        """The partitions to read from a group's position now: unmoved for READ_AFTER_S,
        behind the end, and not read at this end (an open transaction read again)."""
        found: dict[TopicPartition, Standing] = {}
        for waits in self._waits.values():
            for tp, wait in waits.items():
                if (
                    wait.position < wait.end
                    and wait.gap in (None, Gap.OPEN)
                    and now - wait.since >= READ_AFTER_S
                ):
                    # The projector and the saga read one topic: read once from the lower.
                    other = found.get(tp)
                    if other is None or wait.position < other.position:
                        found[tp] = Standing(wait.position, wait.end)
        return found

    def read(self, tp: TopicPartition, position: int, gap: Gap) -> None:
        """What a read from `position` found; a record found below another group's position
        on the same partition says nothing of that group's gap, which starts later."""
        for waits in self._waits.values():
            wait = waits.get(tp)
            if wait is None:
                continue
            if wait.position == position:
                wait.gap = gap
            elif gap is Gap.NOTHING and wait.position > position:
                wait.gap = gap  # nothing from the lower position: nothing from its either
            elif gap is Gap.OPEN and wait.position > position and wait.gap is None:
                wait.gap = gap  # both wait on the open transaction at the last stable offset

    def waiting(self, group: str, now: float) -> list[Waiting]:
        """The group's partitions with work read there and its position unmoved, the
        longest waiting first (stuck once that is STUCK_AFTER_S: group_watch.verdict)."""
        found = [
            Waiting(tp, wait.end - wait.position, now - wait.since, wait.gap is Gap.OPEN)
            for tp, wait in self._waits.get(group, {}).items()
            if wait.gap in (Gap.RECORD, Gap.OPEN)
        ]
        return sorted(found, key=lambda w: (-w.seconds, -w.behind, w.tp))


class GapReader:
    """Reads from a group's position as the groups read (read_committed), to tell work from
    commit markers, with one consumer of no group kept for the intake's life. Between reads
    its partitions are paused, so it fetches nothing."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._reader = KeptConsumer(self._make_reader, "group watch's gap reader")

    async def close(self) -> None:
        await self._reader.close()

    async def read(self, gaps: dict[TopicPartition, Standing]) -> dict[TopicPartition, Gap]:
        """What each gap holds, for those the read settled within READ_TIMEOUT_S."""
        if not gaps:
            return {}
        consumer = await self._reader.get()
        consumer.assign(list(gaps))
        for tp, standing in gaps.items():
            consumer.seek(tp, standing.position)
        found: dict[TopicPartition, Gap] = {}
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                while len(found) < len(gaps):
                    waiting = [tp for tp in gaps if tp not in found]
                    batches = await consumer.getmany(*waiting, timeout_ms=200)
                    for tp, records in batches.items():
                        if any(not inline_answer(r.headers) for r in records):
                            found[tp] = Gap.RECORD
                    for tp in waiting:
                        if tp in found:
                            continue
                        position = await consumer.position(tp)
                        stable = consumer.last_stable_offset(tp)
                        if position >= gaps[tp].end:
                            found[tp] = Gap.NOTHING
                        elif stable is not None and position >= stable:
                            found[tp] = Gap.OPEN
        except TimeoutError:
            pass  # the rest are read again at the next look
        finally:
            consumer.pause(*gaps)
        return found

    def _make_reader(self) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            **connection(self._settings.kafka_bootstrap, "intake-progress"),
            enable_auto_commit=False,
            isolation_level="read_committed",
            max_partition_fetch_bytes=READ_BYTES,
            request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
        )
