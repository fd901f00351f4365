"""A call fence (services.dispatcher.call_fence) is a transactional id's producer id and
epoch, ordered as Kafka fences them, and refuses values Kafka never gives; a process's
book keeps the newest it took each partition with (services.dispatcher.held_leases)."""

import pytest

from services.dispatcher.call_fence import MAX_CLUSTER_CHARS, MAX_EPOCH, MAX_OWNER_CHARS, Fence
from services.dispatcher.held_leases import HeldLeases

CLUSTER = "x9oM2vKcQWu3hPz1sTn0bA"


async def _release(_: object) -> None:
    return None


def test_fences_order_by_producer_id_then_epoch() -> None:
    first = Fence("recon-decider-0", 7, 3, CLUSTER)
    assert first < Fence("recon-decider-0", 7, 4, CLUSTER)
    # An epoch run out: the next take gets a new producer id, allocated above the last.
    assert Fence("recon-decider-0", 7, MAX_EPOCH, CLUSTER) < Fence("recon-decider-0", 8, 0, CLUSTER)


@pytest.mark.parametrize(
    ("owner", "producer_id", "epoch", "cluster"),
    [
        ("", 1, 0, CLUSTER),
        ("x" * (MAX_OWNER_CHARS + 1), 1, 0, CLUSTER),
        ("recon-decider-0", -1, 0, CLUSTER),  # aiokafka's "no producer id": not initialised
        ("recon-decider-0", 2**63, 0, CLUSTER),
        ("recon-decider-0", 1, -1, CLUSTER),
        ("recon-decider-0", 1, MAX_EPOCH + 1, CLUSTER),
        ("recon-decider-0", True, 0, CLUSTER),
        ("recon-decider-0", 1, 1.0, CLUSTER),
        ("recon-decider-0", 1, 0, ""),  # an old broker's metadata answer names none
        ("recon-decider-0", 1, 0, "c" * (MAX_CLUSTER_CHARS + 1)),
        ("recon-decider-0", 1, 0, None),
    ],
)
def test_a_fence_kafka_never_gives_is_refused(
    owner: str, producer_id: int, epoch: int, cluster: str
) -> None:
    with pytest.raises(ValueError, match="call fence"):
        Fence(owner, producer_id, epoch, cluster)


def test_the_book_keeps_each_partitions_newest_fence() -> None:
    book = HeldLeases("holder", lambda _: True, _release)
    assert book.fence(0) is None  # never taken here: its claims carry none
    newer = Fence("recon-decider-0", 7, 4, CLUSTER)
    older = Fence("recon-decider-0", 7, 3, CLUSTER)
    book.fenced(0, newer)
    book.fenced(0, older)  # a late report of an older take
    assert book.fence(0) == newer
    assert book.fence(1) is None


def test_the_book_keeps_a_take_on_another_cluster_whatever_its_ids() -> None:
    # The process's bootstrap reached new brokers: its latest take is the one that counts,
    # though its producer id is smaller (the database orders the clusters).
    book = HeldLeases("holder", lambda _: True, _release)
    book.fenced(0, Fence("recon-decider-0", 90_000, 4, CLUSTER))
    moved = Fence("recon-decider-0", 3, 0, "a-new-cluster")
    book.fenced(0, moved)
    assert book.fence(0) == moved
