"""A decider killed (kill -9) between two of its Kafka transactions: the first committed,
its inputs' offsets with it on the changelog, and the consumer group not told (its lag
marker is sent after the transaction, outside it). The restarted decider must read its
position back from the changelog: from the group's offsets it would decide the
transaction's inputs again.

The transaction held is one that ends a recon transaction, so a second decision would
show: an input of a finished transaction read again is recorded again, as
ObservationIgnored (transactions.finished: a marker keeps no input ids).
"""

from pathlib import Path

from support.crash_support import start_paused_at, wait_paused
from support.decider_support import (
    changelog_offsets,
    event_types,
    eventually,
    group_offsets,
    lone_decider,
    produce,
)
from support.txbuilders import observed, submit

from events.inputs import Outcome, Source
from events.topics import Topics
from services.crash_points import DECIDER_AFTER_COMMIT
from services.decider.input_offsets import LAG_MARKER_METADATA
from services.kafka_setup import ensure_topics

PARTITION = 2
TX = "between-1"


async def test_a_decider_killed_between_two_transactions_reads_its_offsets_back_from_the_changelog(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    group = f"{topic_prefix}recon-decider"
    marker = tmp_path / "paused"
    async with lone_decider(kafka_bootstrap, topic_prefix, tmp_path) as stack:
        start_paused_at(stack, "decider", DECIDER_AFTER_COMMIT, marker)
        await produce(kafka_bootstrap, topics.commands, [submit(["a"], tx_id=TX)], PARTITION)

        async def dispatched() -> bool | None:
            types = await event_types(kafka_bootstrap, topics, TX)
            return True if "OperationDispatched" in types else None

        await eventually(dispatched, "the step is dispatched")
        confirmed = observed("a", 1, Outcome.SUCCEEDED, tx_id=TX)
        await produce(kafka_bootstrap, topics.observations, [confirmed], PARTITION)
        await wait_paused(stack, "decider", marker)

        # Held right after the transaction that ended TX committed: the changelog holds
        # both inputs as decided, the group has not heard of the observation.
        assert await changelog_offsets(kafka_bootstrap, topics, PARTITION) == {
            topics.commands: 1,
            topics.observations: 1,
        }
        assert await event_types(kafka_bootstrap, topics, TX) == [
            "TransactionAccepted",
            "OperationDispatched",
            "OperationConfirmed",
            "TransactionCommitted",
        ]
        behind = await group_offsets(kafka_bootstrap, group, PARTITION)
        assert topics.observations not in behind, behind

        stack.kill("decider")
        stack.start("decider")
        # A late webhook for TX, and a new transaction behind it on the same partition.
        late = observed("a", 1, Outcome.SUCCEEDED, source=Source.WEBHOOK, tx_id=TX)
        await produce(kafka_bootstrap, topics.observations, [late], PARTITION)
        await produce(kafka_bootstrap, topics.commands, [submit(["a"], tx_id="after-1")], PARTITION)

        async def both_decided() -> bool | None:
            after = await event_types(kafka_bootstrap, topics, "after-1")
            ignored = "ObservationIgnored" in await event_types(kafka_bootstrap, topics, TX)
            return True if "OperationDispatched" in after and ignored else None

        await eventually(both_decided, "the restarted decider decides the inputs after the crash")

        # The group's lag marker catches up with the changelog, tagged as only that.
        async def caught_up() -> bool | None:
            found = await group_offsets(kafka_bootstrap, group, PARTITION)
            wanted = {topics.commands: 2, topics.observations: 2}
            return True if found and {t: m.offset for t, m in found.items()} == wanted else None

        await eventually(caught_up, "the group's offsets reach the changelog's")
        found = await group_offsets(kafka_bootstrap, group, PARTITION)
        assert {m.metadata for m in found.values()} == {LAG_MARKER_METADATA}

    # Each input decided once: the confirmation once (not recorded again as ignored), the
    # late webhook once.
    assert await event_types(kafka_bootstrap, topics, TX) == [
        "TransactionAccepted",
        "OperationDispatched",
        "OperationConfirmed",
        "TransactionCommitted",
        "ObservationIgnored",
    ]
    assert await changelog_offsets(kafka_bootstrap, topics, PARTITION) == {
        topics.commands: 2,
        topics.observations: 2,
    }
