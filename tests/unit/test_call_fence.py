"""A call fence (services.dispatcher.call_fence) is a transactional id's producer id and
epoch, ordered as Kafka fences them, and refuses values Kafka never gives; a process's
book keeps the newest it took each partition with (services.dispatcher.held_leases)."""

import pytest

from services.dispatcher.call_fence import MAX_EPOCH, MAX_OWNER_CHARS, Fence
from services.dispatcher.held_leases import HeldLeases


async def _release(_: object) -> None:
    return None


def test_fences_order_by_producer_id_then_epoch() -> None:
    first = Fence("recon-decider-0", 7, 3)
    assert first < Fence("recon-decider-0", 7, 4)
    # An epoch run out: the next take gets a new producer id, allocated above the last.
    assert Fence("recon-decider-0", 7, MAX_EPOCH) < Fence("recon-decider-0", 8, 0)


@pytest.mark.parametrize(
    ("owner", "producer_id", "epoch"),
    [
        ("", 1, 0),
        ("x" * (MAX_OWNER_CHARS + 1), 1, 0),
        ("recon-decider-0", -1, 0),  # aiokafka's "no producer id": not initialised
        ("recon-decider-0", 2**63, 0),
        ("recon-decider-0", 1, -1),
        ("recon-decider-0", 1, MAX_EPOCH + 1),
        ("recon-decider-0", True, 0),
        ("recon-decider-0", 1, 1.0),
    ],
)
def test_a_fence_kafka_never_gives_is_refused(owner: str, producer_id: int, epoch: int) -> None:
    with pytest.raises(ValueError, match="call fence"):
        Fence(owner, producer_id, epoch)


def test_the_book_keeps_each_partitions_newest_fence() -> None:
    book = HeldLeases("holder", lambda _: True, _release)
    assert book.fence(0) is None  # never taken here: its claims carry none
    newer, older = Fence("recon-decider-0", 7, 4), Fence("recon-decider-0", 7, 3)
    book.fenced(0, newer)
    book.fenced(0, older)  # a late report of an older take
    assert book.fence(0) == newer
    assert book.fence(1) is None
